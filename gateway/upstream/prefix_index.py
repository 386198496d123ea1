"""Which prompt prefixes a replica holds, as chained keys of block-sized chunks of token ids.

A prompt is cut into `block_tokens`-sized chunks (a partial last chunk is never cached by
vLLM, so it gets no key). Chunk i's key is a 64-bit XXH3 of its int32 bytes seeded with
chunk i-1's key: a key names the whole prefix up to its chunk's end, as vLLM's own block
hashes do, so "how much of this prompt does the replica hold" is "how many leading keys
does it know". The first chunk's seed is the process's random seed (crafted prompts cannot
aim at other prompts' keys; a collision only misroutes, it never mixes data).

Anything vLLM keys a block by besides its tokens is mixed into the key of the block's
first chunk, the same way on both sides: the `cache_salt` of the prompt's first block
(tenants with different salts never match, as their blocks never match in vLLM), and a
KV event's per-block extra keys (images' `(identifier, offset)` pairs, a LoRA's name):
a block of image placeholders never matches the same placeholder ids of another image,
nor of a text prompt. Keys are only comparable inside one process; every process builds
its own indexes (from what it sent, or from the replicas' KV events).

A prompt's keys are a `KeyChain`, and `prompt_keys` is the one function that makes them (what
else keys the first chunk included). A chain is kept with the exact tokens it was made from
(a session's `TokenState`): the next prompt, which starts with those tokens, reuses their keys
after one comparison of the ids (numpy, no hashing) and hashes only the chunks after them — a
turn's keys cost its new tokens, not its history.

`SentIndex` is filled from what the gateway sent to a replica and ages out like vLLM's
own cache: least recently used first, bounded by the replica's KV capacity in chunks, and
a prompt's tail before its head (vLLM frees a finished request's blocks tail first, so
its prefix outlives its ending). `BlockIndex` is fed by a replica's KV events
(gateway/upstream/_kv_events.py): exact, as long as the events keep coming.
"""

from __future__ import annotations

import heapq
import os
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import msgpack
import numpy as np
import xxhash

__all__ = ["BLOCK_TOKENS", "BlockIndex", "KeyChain", "SentIndex", "SentTree", "chunk_keys", "prompt_keys"]

BLOCK_TOKENS = 16  # vLLM's default --block-size on GPUs; it must divide the replicas' block size
_SEED = int.from_bytes(os.urandom(8), "little")
_hash = xxhash.xxh3_64_intdigest


class KeyChain:
    """The keys of a token sequence's full chunks, first to last (uint64s, 8 bytes a chunk), and
    what they were made with: a chain is reused only for a prompt keyed the same way."""

    __slots__ = ("block_tokens", "extra", "keys", "seed")

    def __init__(self, keys: array, block_tokens: int, seed: int, extra: tuple[Any, ...] | None) -> None:
        self.keys = keys
        self.block_tokens = block_tokens
        self.seed = seed
        self.extra = extra

    def __len__(self) -> int:
        return len(self.keys)

    def same_keying(self, other: KeyChain) -> bool:
        return (self.block_tokens, self.seed, self.extra) == (other.block_tokens, other.seed, other.extra)


def first_chunk_extra(cache_salt: str | None) -> tuple[Any, ...] | None:
    """What a prompt's first chunk is keyed by besides its ids (as vLLM's first block hash)."""
    return (cache_salt,) if cache_salt else None


def prompt_keys(ids: Sequence[int] | np.ndarray, block_tokens: int = BLOCK_TOKENS, *,
                cache_salt: str | None = None, seed: int | None = None,
                after: tuple[Sequence[int], KeyChain] | None = None) -> KeyChain:
    """The chained keys of `ids`' full chunks. `after`: earlier exact tokens and their chain
    (keyed the same way); the keys of the chunks `ids` shares with them are taken from it, and
    only the chunks after those are hashed."""
    chain = KeyChain(array("Q"), block_tokens, _SEED if seed is None else seed, first_chunk_extra(cache_salt))
    data = _int32(ids)
    shared = _shared_chunks(data, after, chain) if after is not None else 0
    if shared:
        chain.keys = after[1].keys[:shared]  # type: ignore[index]
    start = shared * block_tokens
    chain.keys.extend(_chain(memoryview(data[start:]).cast("B"), block_tokens,
                             chain.keys[-1] if shared else chain.seed, None if shared else chain.extra))
    return chain


def _shared_chunks(data: np.ndarray, after: tuple[Sequence[int], KeyChain], chain: KeyChain) -> int:
    """How many of `after`'s keys `data` starts with: its chunks whose ids are the same."""
    tokens, known = after
    if not known.same_keying(chain):
        return 0
    n = min(len(known.keys), len(data) // chain.block_tokens, len(tokens) // chain.block_tokens)
    if n == 0:
        return 0
    size = n * chain.block_tokens
    same = data[:size] == _int32(tokens)[:size]
    return n if same.all() else int(np.argmin(same)) // chain.block_tokens


def chunk_keys(ids: Sequence[int] | np.ndarray, block_tokens: int = BLOCK_TOKENS, *,
               cache_salt: str | None = None, seed: int | None = None) -> list[int]:
    """The chained keys of `ids`' full chunks, first to last."""
    return prompt_keys(ids, block_tokens, cache_salt=cache_salt, seed=seed).keys.tolist()


def block_keys(token_ids: Sequence[int], block_tokens: int, seed: int,
               extra: Sequence[Any] | None = None) -> list[int]:
    """The keys of one vLLM block's chunks after the chain's key `seed` (the block's parent's
    last key, or the process seed for a first block); `extra`: the block's extra keys."""
    return _chain(memoryview(_int32_bytes(token_ids)), block_tokens, seed, extra)


def root_seed() -> int:
    """The seed of every chain's first chunk in this process."""
    return _SEED


def _chain(data: memoryview, block_tokens: int, seed: int, extra: Sequence[Any] | None) -> list[int]:
    step = 4 * block_tokens
    end = len(data) - len(data) % step
    if end == 0:
        return []
    keys = []
    if extra:  # into the first chunk's key, as vLLM mixes a block's extra keys into its hash
        seed = _hash(bytes(data[:step]) + msgpack.packb(list(extra), use_bin_type=True), seed)
        keys.append(seed)
        start = step
    else:
        start = 0
    for offset in range(start, end, step):
        seed = _hash(data[offset:offset + step], seed)
        keys.append(seed)
    return keys


def _int32_bytes(ids: Sequence[int] | np.ndarray) -> bytes:
    return _int32(ids).tobytes()


def _int32(ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """`ids` as int32s; an int32 array (a session's tokens) is viewed, not copied."""
    if isinstance(ids, np.ndarray) and ids.dtype == np.int32:
        return ids
    if isinstance(ids, array) and ids.typecode == "i" and ids.itemsize == 4:
        return np.frombuffer(ids, dtype=np.int32) if len(ids) else np.empty(0, np.int32)
    return np.asarray(ids, dtype=np.int32)


def matched(keys: Sequence[int], held: Any) -> int:
    """How many of `keys`, from the first, `held` contains (the held prefix, in chunks)."""
    n = 0
    for key in keys:
        if key not in held:
            break
        n += 1
    return n


class SentIndex:
    """The chunks of prompts sent to one replica, least recently used evicted first."""

    def __init__(self, capacity: int) -> None:
        """`capacity`: chunks the replica's KV cache holds (its blocks × block size / chunk size)."""
        self.capacity = capacity
        self._keys: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: int) -> bool:
        return key in self._keys

    def match(self, keys: Sequence[int]) -> int:
        return matched(keys, self._keys)

    def add(self, keys: Sequence[int]) -> None:
        """Record a prompt sent: its chunks become the most recently used, its head most of all."""
        held = self._keys
        for key in reversed(keys):
            held[key] = None
            held.move_to_end(key)
        while len(held) > self.capacity:
            held.popitem(last=False)

    def discard(self, keys: Iterable[int]) -> None:
        for key in keys:
            self._keys.pop(key, None)

    def resize(self, capacity: int) -> None:
        self.capacity = capacity
        while len(self._keys) > capacity:
            self._keys.popitem(last=False)

    def clear(self) -> None:
        self._keys.clear()


class SentTree:
    """`SentIndex` for a replica without KV events, at the cost of a prompt's new chunks only.

    A prompt's keys are a chain: a prompt holding a chunk holds all of its prefix, and sending
    it makes each chunk more recent than those after it. So the chunks held of any prompt are
    a prefix of it (`match` bisects), and the least recently used chunk is always one that no
    held chunk continues, a leaf of the tree the prompts make. Only a leaf's last use matters
    then, and a prompt sent stamps only its last chunk: a chunk whose last child is evicted was
    used last either when a prompt ended on it (its stamp) or with that child, which was the
    least recently used of all, so it is next in either case. Sending touches the prompt's new
    chunks and its last one; evicting pops a heap. The evictions are `SentIndex`'s, in its order.
    """

    def __init__(self, capacity: int) -> None:
        """`capacity`: chunks the replica's KV cache holds (its blocks × block size / chunk size)."""
        self.capacity = capacity
        self._nodes: dict[int, list[Any]] = {}  # key → [parent key or None, children held, last use]
        self._leaves: list[tuple[int, int]] = []  # (last use, key) of chunks without children; stale ones skipped
        self._clock = 0

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, key: int) -> bool:
        return key in self._nodes

    def match(self, keys: Sequence[int]) -> int:
        nodes, low, high = self._nodes, 0, len(keys)
        while low < high:  # keys[:low] are held, keys[high:] are not
            middle = (low + high + 1) // 2
            if keys[middle - 1] in nodes:
                low = middle
            else:
                high = middle - 1
        return low

    def add(self, keys: Sequence[int]) -> None:
        """Record a prompt sent: its chunks become the most recently used, its head most of all."""
        if not len(keys):
            return
        self._clock += 1
        now, nodes, last = self._clock, self._nodes, len(keys) - 1
        held = self.match(keys)
        parent = keys[held - 1] if held else None
        if held <= last and parent is not None:
            nodes[parent][1] += 1
        for i in range(held, last + 1):
            nodes[keys[i]] = [parent, int(i < last), now]
            parent = keys[i]
        tip = nodes[keys[last]]
        tip[2] = now
        if not tip[1]:
            heapq.heappush(self._leaves, (now, keys[last]))
        self._evict()

    def _evict(self) -> None:
        nodes, leaves = self._nodes, self._leaves
        while len(nodes) > self.capacity:
            used, key = heapq.heappop(leaves)
            node = nodes.get(key)
            if node is None or node[1] or node[2] != used:
                continue  # touched, extended or evicted since
            del nodes[key]
            if node[0] is not None:
                parent = nodes[node[0]]  # a parent outlives its children
                parent[1] -= 1
                if not parent[1]:  # its last use: the one it ended a prompt on, or else less than any other leaf's
                    heapq.heappush(leaves, (parent[2], node[0]))
        if len(leaves) > 2 * len(nodes) + 64:  # mostly stale: only leaves' latest entries count
            self._leaves = [(node[2], key) for key, node in nodes.items() if not node[1]]
            heapq.heapify(self._leaves)

    def resize(self, capacity: int) -> None:
        self.capacity = capacity
        self._evict()

    def clear(self) -> None:
        self._nodes.clear()
        self._leaves.clear()


class BlockIndex:
    """One replica's cached blocks as its KV events report them, re-keyed into our chunk keys.

    A stored block whose parent we never saw (an event lost before we subscribed, beyond
    the replay buffer) cannot be placed in a chain and is skipped; its descendants too.
    """

    def __init__(self, block_tokens: int = BLOCK_TOKENS, max_blocks: int = 4_000_000) -> None:
        self.block_tokens = block_tokens
        self.max_blocks = max_blocks  # memory bound beyond any real KV cache: new blocks are dropped past it
        self._blocks: dict[bytes | int, list[int]] = {}  # vLLM's block hash → our chunk keys of that block
        self._chunks: dict[int, int] = {}  # chunk key → blocks holding it
        self.skipped = 0  # stored blocks that could not be placed (unknown parent, odd size)

    def __len__(self) -> int:
        return len(self._chunks)

    def __contains__(self, key: int) -> bool:
        return key in self._chunks

    @property
    def n_blocks(self) -> int:
        return len(self._blocks)

    def match(self, keys: Sequence[int]) -> int:
        return matched(keys, self._chunks)

    def stored(self, block_hashes: Sequence[bytes | int], parent: bytes | int | None, token_ids: Sequence[int],
               block_size: int, extra_keys: Sequence[Sequence[Any] | None] | None = None) -> list[int]:
        """`BlockStored`: consecutive blocks chained under `parent`; returns the new chunk keys."""
        if parent is None:
            seed = _SEED
        elif (parent_keys := self._blocks.get(parent)) and parent_keys:
            seed = parent_keys[-1]
        else:
            self.skipped += len(block_hashes)
            return []
        if block_size % self.block_tokens or len(token_ids) != block_size * len(block_hashes):
            self.skipped += len(block_hashes)
            return []
        added: list[int] = []
        for i, block_hash in enumerate(block_hashes):
            extra = extra_keys[i] if extra_keys and i < len(extra_keys) else None
            keys = block_keys(token_ids[i * block_size:(i + 1) * block_size], self.block_tokens, seed, extra)
            seed = keys[-1]
            if block_hash in self._blocks:
                continue
            if len(self._blocks) >= self.max_blocks:
                self.skipped += 1
                continue
            self._blocks[block_hash] = keys
            for key in keys:
                self._chunks[key] = self._chunks.get(key, 0) + 1
            added += keys
        return added

    def removed(self, block_hashes: Iterable[bytes | int]) -> None:
        """`BlockRemoved`: the blocks left the replica's cache (their children may stay)."""
        chunks = self._chunks
        for block_hash in block_hashes:
            for key in self._blocks.pop(block_hash, ()):
                left = chunks[key] - 1
                if left:
                    chunks[key] = left
                else:
                    del chunks[key]

    def clear(self) -> None:
        """`AllBlocksCleared`, or the replica restarted."""
        self._blocks.clear()
        self._chunks.clear()
