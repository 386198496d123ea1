"""The prefix index against its slow definition: held prefix = longest common full-chunk prefix."""

from __future__ import annotations

import itertools
from array import array

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.upstream.prefix_index import (
    BlockIndex,
    SentIndex,
    SentTree,
    block_keys,
    chunk_keys,
    prompt_keys,
    root_seed,
)

C = 4  # chunk tokens, small so random trees share and diverge inside a few chunks


@st.composite
def prefix_trees(draw, max_prompts: int = 12) -> list[list[int]]:
    """Prompts as paths through a random prefix tree: each starts with a cut of an earlier one."""
    prompts: list[list[int]] = []
    for _ in range(draw(st.integers(1, max_prompts))):
        head: list[int] = []
        if prompts:
            parent = draw(st.sampled_from(prompts))
            head = parent[:draw(st.integers(0, len(parent)))]
        tail = draw(st.lists(st.integers(0, 7), max_size=3 * C + 2))  # a small vocabulary: chunks recur
        prompts.append(head + tail)
    return prompts


def common_chunks(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n // C


@given(prefix_trees(), st.lists(st.integers(0, 7), max_size=30))
def test_the_held_prefix_is_the_longest_common_full_chunk_prefix_of_what_was_sent(sent, probe):
    index = SentIndex(capacity=10_000)
    for prompt in sent:
        index.add(chunk_keys(prompt, C))
    assert index.match(chunk_keys(probe, C)) == max(common_chunks(probe, s) for s in sent)
    for prompt in sent:
        assert index.match(chunk_keys(prompt, C)) == len(prompt) // C


@given(prefix_trees(), st.integers(1, 12))
def test_a_full_index_forgets_tails_first_and_keeps_the_latest_prompt(sent, capacity):
    index = SentIndex(capacity)
    for prompt in sent:
        index.add(chunk_keys(prompt, C))
        assert len(index) <= capacity
    for prompt in sent:  # what is left of any prompt is a prefix of it, never a hole
        keys = chunk_keys(prompt, C)
        held = index.match(keys)
        assert not any(key in index for key in keys[held:])
    latest = chunk_keys(sent[-1], C)
    assert index.match(latest) == min(len(latest), capacity)


@given(prefix_trees(max_prompts=10), st.lists(st.integers(0, 40), min_size=1, max_size=40), st.integers(1, 24),
       st.data())
def test_the_tree_holds_and_evicts_exactly_what_the_list_does(prompts, order, capacity, data):
    """`SentTree` against `SentIndex` (the plain LRU list): prompts sent in any order, again and
    again, through small capacities, resizes and clears, hold the same chunks after every step."""
    tree, listed = SentTree(capacity), SentIndex(capacity)
    seen: set[int] = set()
    for step, pick in enumerate(order):
        keys = chunk_keys(prompts[pick % len(prompts)], C)
        seen.update(keys)
        for index in (tree, listed):
            index.add(keys)
        if step % 7 == 6:
            smaller = data.draw(st.integers(1, capacity))
            for index in (tree, listed):
                index.resize(smaller)
        if data.draw(st.integers(0, 30)) == 0:
            for index in (tree, listed):
                index.clear()
        assert len(tree) == len(listed)
        assert {key for key in seen if key in tree} == {key for key in seen if key in listed}
        for prompt in prompts:
            assert tree.match(chunk_keys(prompt, C)) == listed.match(chunk_keys(prompt, C))


def test_keys_depend_on_the_whole_prefix_the_salt_and_the_int32_ids():
    a = chunk_keys([1, 2, 3, 4, 5, 6, 7, 8, 9], C)
    assert len(a) == 2  # the partial last chunk has no key: vLLM never caches it
    assert chunk_keys([9, 2, 3, 4, 5, 6, 7, 8], C)[1] != a[1]  # same chunk, other prefix
    assert chunk_keys(np.arange(1, 9, dtype=np.int32), C) == a
    salted = chunk_keys([1, 2, 3, 4, 5, 6, 7, 8], C, cache_salt="tenant-a")
    assert not set(salted) & set(a)
    assert not set(salted) & set(chunk_keys([1, 2, 3, 4, 5, 6, 7, 8], C, cache_salt="tenant-b"))
    assert salted == chunk_keys([1, 2, 3, 4, 5, 6, 7, 8], C, cache_salt="tenant-a")


@given(st.lists(st.integers(0, 7), max_size=12 * C), st.integers(0, 12 * C), st.integers(0, 12 * C),
       st.lists(st.integers(0, 7), max_size=6 * C), st.sampled_from([None, "tenant-a"]),
       st.sampled_from([None, "tenant-a", "tenant-b"]), st.booleans())
def test_keys_made_after_earlier_tokens_equal_the_keys_made_from_scratch(earlier, keyed, cut, tail, salt, then_salt,
                                                                         as_array):
    """A session's next prompt (its tokens up to any cut, then anything: its last token dropped,
    an edit inside a chunk, a new tail) keyed after the turn before's keys, which covered only
    the first `keyed` of those tokens (the prompt, not what the model generated)."""
    chain = prompt_keys(earlier[:keyed], C, cache_salt=salt)
    prompt = earlier[:cut] + tail
    tokens = array("i", earlier) if as_array else earlier
    ids = array("i", prompt) if as_array else prompt
    assert prompt_keys(ids, C, cache_salt=then_salt, after=(tokens, chain)).keys.tolist() == \
        chunk_keys(prompt, C, cache_salt=then_salt)


def test_keys_after_earlier_tokens_take_the_shared_chunks_keys_from_their_chain():
    history = array("i", range(50_000))
    chain = prompt_keys(history, C)
    marked = chain.keys[0] = 12345  # not a hash of anything: seen again only if taken, not recomputed
    grown = history + array("i", range(3 * C + 1))
    keys = prompt_keys(grown, C, after=(history, chain)).keys
    assert keys[0] == marked and keys[1:].tolist() == chunk_keys(grown, C)[1:]
    edited = array("i", grown)
    edited[4 * C + 1] = 99  # the ids differ inside chunk 4: its keys and all after it are hashed again
    keys = prompt_keys(edited, C, after=(history, chain)).keys
    assert keys[0] == marked and keys[4:].tolist() == chunk_keys(edited, C)[4:]


def stored_events(prompt: list[int], block: int, *, first: int = 0, salt: str | None = None,
                  extra: dict[int, list] | None = None) -> list[tuple]:
    """vLLM's BlockStored for `prompt`'s full blocks from block `first` on, in runs of up to
    three blocks (one event per scheduler step), with vLLM-like hashes: the block's index."""
    n = len(prompt) // block
    events = []
    for start in range(first, n, 3):
        ids = list(range(start, min(start + 3, n)))
        extras = [([salt] if salt and i == 0 else None) if extra is None or i not in extra else extra[i]
                  for i in ids]
        events.append((ids, start - 1 if start else None, prompt[start * block:(ids[-1] + 1) * block], block,
                       extras if any(extras) else None))
    return events


@given(st.lists(st.integers(0, 50_000), max_size=200), st.sampled_from([C, 2 * C, 4 * C]), st.data())
def test_events_rekeyed_from_token_ids_match_the_prompt_block_for_block(prompt, block, data):
    index = BlockIndex(C)
    for event in stored_events(prompt, block):
        index.stored(*event)
    keys = chunk_keys(prompt, C)
    n_blocks = len(prompt) // block
    assert index.match(keys) == n_blocks * block // C
    if n_blocks:
        gone = data.draw(st.integers(0, n_blocks - 1))
        index.removed([gone])  # an evicted block ends the held prefix there, whatever follows
        assert index.match(keys) == gone * block // C
        index.stored([gone], gone - 1 if gone else None, prompt[gone * block:(gone + 1) * block], block)
        assert index.match(keys) == n_blocks * block // C
    index.clear()
    assert index.match(keys) == 0 and len(index) == 0


def test_salted_and_multimodal_blocks_match_only_their_own_prompts():
    prompt = list(range(100, 100 + 6 * C))
    salted = BlockIndex(C)
    for event in stored_events(prompt, 2 * C, salt="tenant-a"):
        salted.stored(*event)
    assert salted.match(chunk_keys(prompt, C, cache_salt="tenant-a")) == 6
    assert salted.match(chunk_keys(prompt, C)) == 0
    assert salted.match(chunk_keys(prompt, C, cache_salt="tenant-b")) == 0
    image = BlockIndex(C)  # block 1 holds an image's placeholders: vLLM's (identifier, offset) pair
    for event in stored_events(prompt, 2 * C, extra={1: [["3f2a…", 0]]}):
        image.stored(*event)
    assert image.match(chunk_keys(prompt, C)) == 2  # the text prompt with the same ids stops at the image


def test_a_block_whose_parent_was_never_seen_is_skipped_not_misplaced():
    prompt = list(range(8 * C))
    index = BlockIndex(C)
    index.stored([5], 4, prompt[5 * C:6 * C], C)  # its parent's event was lost
    assert index.skipped == 1 and len(index) == 0
    index.stored([0, 1], None, prompt[:2 * C], C)
    assert index.match(chunk_keys(prompt, C)) == 2
    assert block_keys(prompt[:C], C, root_seed()) == chunk_keys(prompt, C)[:1]


def test_two_blocks_holding_one_chunk_keep_it_until_both_are_gone():
    prompt = list(itertools.islice(itertools.cycle(range(3)), 2 * C))
    index = BlockIndex(C)
    index.stored(["a"], None, prompt[:C], C)
    index.stored(["b"], None, prompt[:C], C)  # the same tokens cached twice (another group, a re-store)
    index.removed(["a"])
    assert index.match(chunk_keys(prompt, C)) == 1
    index.removed(["b"])
    assert index.match(chunk_keys(prompt, C)) == 0


@settings(max_examples=50)
@given(prefix_trees(max_prompts=8))
def test_sent_and_event_fed_indexes_agree_on_what_a_replica_holds(sent):
    """The same prompts, once as sent and once as a replica's events report them."""
    by_sending, by_events = SentIndex(10_000), BlockIndex(C)
    cached: dict[tuple[int, ...], int] = {}  # a replica's block table: the prefix through a block → its hash
    for prompt in sent:
        by_sending.add(chunk_keys(prompt, C))
        for i in range(len(prompt) // C):
            through = tuple(prompt[:(i + 1) * C])
            if through not in cached:
                cached[through] = len(cached)
                parent = cached[tuple(prompt[:i * C])] if i else None
                by_events.stored([cached[through]], parent, prompt[i * C:(i + 1) * C], C)
    for prompt in sent:
        keys = chunk_keys(prompt, C)
        assert by_events.match(keys) == by_sending.match(keys) == len(prompt) // C
