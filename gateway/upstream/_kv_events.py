"""A replica's KV-cache events, subscribed to over ZMQ, kept as its `BlockIndex`.

Stock vLLM started with `--kv-events-config '{"enable_kv_cache_events": true, "publisher":
"zmq", "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558"}'` publishes, once per
engine step, a batch of what its prefix cache gained and lost (vllm/distributed/kv_events.py):

- PUB frames `(topic, seq, payload)`: `seq` an 8-byte big-endian counter from 0 per
  publisher, `payload` msgpack of `[ts, events, data_parallel_rank]`; each event a map
  tagged by `type` — `BlockStored` (`block_hashes`, `parent_block_hash`, `token_ids`,
  `block_size`, `extra_keys`, `medium`, `group_idx`…), `BlockRemoved` (`block_hashes`),
  `AllBlocksCleared` (vLLM before 0.11 sent the same fields as a positional array).
- Replay: a DEALER sends `(b"", start_seq)` to the ROUTER replay endpoint and gets
  `(b"", topic, seq, payload)` for every buffered batch from `start_seq` on (vLLM keeps the
  last `buffer_steps`, 10,000 by default), then `(b"", b"", -1, b"")`.

The subscriber re-keys stored blocks from their token ids (gateway/upstream/prefix_index.py),
so it needs neither vLLM's hash seed nor its hash function. Only the GPU tier of the first
KV-cache group is indexed (what a request's prefill reuses). A missed stretch of batches
(a reconnect, a slow reader past the publisher's high-water mark) is replayed from the
sequence number after the last one taken; a sequence number going back means the
publisher restarted: the replica's cache is empty, and the index is cleared.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import zmq
import zmq.asyncio

from gateway.upstream.prefix_index import BlockIndex

__all__ = ["KVEventSubscriber"]

log = logging.getLogger(__name__)

END_SEQ = -1
REPLAY_TIMEOUT = 5.0  # seconds a replay may stay silent before it is given up
# Field order of the positional (array) events of vLLM before 0.11, after the tag.
_STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium")
_REMOVED_FIELDS = ("block_hashes", "medium")


@dataclass
class EventStats:
    batches: int = 0  # batches taken (live and replayed)
    replayed: int = 0  # of which came from a replay
    gaps: int = 0  # stretches of missed batches seen
    restarts: int = 0  # publisher restarts seen (the index was cleared)
    malformed: int = 0  # payloads that could not be read


class KVEventSubscriber:
    """Keeps `index` true to one replica's published events while `run()` runs.

    `live` turns true with the first batch taken: until then the index knows nothing
    and the router relies on what it sent. `on_stored` gets each stored block's new
    chunk keys (the router stops counting those as merely sent)."""

    def __init__(self, index: BlockIndex, endpoint: str, replay_endpoint: str | None = None, *,
                 topic: str = "", on_stored: Callable[[list[int]], None] | None = None,
                 context: zmq.asyncio.Context | None = None) -> None:
        self.index = index
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self.topic = topic.encode()
        self.on_stored = on_stored
        self.last_seq = -1  # the last batch taken
        self.live = False
        self.stats = EventStats()
        self._context = context or zmq.asyncio.Context.instance()
        self._dedupe_through = -1  # after a replay, live batches up to here were taken already

    async def run(self) -> None:
        """Subscribe and take batches until cancelled (ZMQ reconnects by itself)."""
        sub = self._context.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, 0)  # our side never drops: the publisher's HWM is the only loss
        sub.setsockopt(zmq.SUBSCRIBE, self.topic)
        sub.connect(self.endpoint)
        try:
            if self.replay_endpoint is not None and await self._replay(self.last_seq + 1):
                self._dedupe_through = self.last_seq  # what was cached before we subscribed
            while True:
                frames = await sub.recv_multipart()
                if len(frames) != 3:
                    self.stats.malformed += 1
                    continue
                await self._take_live(int.from_bytes(frames[1], "big", signed=True), frames[2])
        finally:
            sub.close(linger=0)

    async def _take_live(self, seq: int, payload: bytes) -> None:
        if seq <= self._dedupe_through:  # already taken by the replay that just ran
            return
        self._dedupe_through = -1
        if seq <= self.last_seq:
            log.info("kv events %s: sequence went back (%d after %d): the replica restarted; its cache is empty",
                     self.endpoint, seq, self.last_seq)
            self.stats.restarts += 1
            self.index.clear()
            self.last_seq = -1
        if seq > self.last_seq + 1:
            self.stats.gaps += 1
            if self.replay_endpoint is None or not await self._replay(self.last_seq + 1, until=seq):
                log.warning("kv events %s: batches %d–%d missed; the index may hold blocks the replica dropped",
                            self.endpoint, self.last_seq + 1, seq - 1)
        self._take(seq, payload)

    async def _replay(self, start: int, until: int | None = None) -> bool:
        """Ask for the buffered batches from `start` on (before `until`) and take them; False
        if the replay endpoint did not answer."""
        dealer = self._context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.replay_endpoint)
        try:
            await dealer.send_multipart((b"", start.to_bytes(8, "big")))
            while True:
                async with asyncio.timeout(REPLAY_TIMEOUT):
                    frames = await dealer.recv_multipart()
                if len(frames) != 4:
                    self.stats.malformed += 1
                    continue
                seq = int.from_bytes(frames[2], "big", signed=True)
                if seq == END_SEQ:
                    break
                if seq > self.last_seq and (until is None or seq < until):
                    self._take(seq, frames[3], replayed=True)
        except TimeoutError:
            log.warning("kv events %s: the replay endpoint %s did not answer", self.endpoint, self.replay_endpoint)
            return False
        finally:
            dealer.close(linger=0)
        return True

    def _take(self, seq: int, payload: bytes, *, replayed: bool = False) -> None:
        self.last_seq = seq
        self.live = True
        self.stats.batches += 1
        self.stats.replayed += replayed
        try:
            batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            events = batch[1]
        except (ValueError, TypeError, IndexError, msgpack.UnpackException):
            self.stats.malformed += 1
            return
        for event in events:
            with contextlib.suppress(KeyError, TypeError, ValueError, IndexError):
                self._apply(_fields(event))
                continue
            self.stats.malformed += 1

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "AllBlocksCleared":
            self.index.clear()
            return
        if event.get("medium") not in (None, "GPU") or event.get("group_idx") not in (None, 0):
            return
        if kind == "BlockStored":
            added = self.index.stored(event["block_hashes"], event.get("parent_block_hash"), event["token_ids"],
                                      event["block_size"], event.get("extra_keys"))
            if added and self.on_stored is not None:
                self.on_stored(added)
        elif kind == "BlockRemoved":
            self.index.removed(event["block_hashes"])


def _fields(event: dict[str, Any] | Sequence[Any]) -> dict[str, Any]:
    """An event as a map, whichever way it was encoded."""
    if isinstance(event, dict):
        return event
    kind, *values = event
    names = {"BlockStored": _STORED_FIELDS, "BlockRemoved": _REMOVED_FIELDS}.get(kind, ())
    return {"type": kind, **dict(zip(names, values, strict=False))}
