"""The KV-event subscriber's sequence handling, against a scripted publisher on real ZMQ sockets
speaking vLLM's wire shapes (a restarted publisher, a lost stretch replayed, malformed input).
tests/upstream/test_kv_events_real_vllm.py runs it against stock vLLM."""

from __future__ import annotations

import asyncio
import contextlib

import msgpack
import zmq
import zmq.asyncio

from gateway.ops.vllm_process import free_port
from gateway.upstream._kv_events import KVEventSubscriber
from gateway.upstream.prefix_index import BlockIndex, chunk_keys
from tests.support.waiting import async_wait_for

C = 16


def stored(block: int, parent: int | None, ids: list[int]) -> dict:
    return {"type": "BlockStored", "block_hashes": [block], "parent_block_hash": parent, "token_ids": ids,
            "block_size": len(ids), "lora_id": None, "medium": "GPU", "lora_name": None}


class Publisher:
    """vLLM's ZmqEventPublisher, scripted: PUB frames (topic, seq, payload), a ROUTER replaying
    its buffer from a requested sequence number, then the end marker. An XPUB stands in for
    the PUB (the same wire to a SUB) so the test can await the subscription arriving."""

    def __init__(self) -> None:
        self.context = zmq.asyncio.Context()
        self.pub = self.context.socket(zmq.XPUB)
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.pub.bind(self.endpoint)
        self.router = self.context.socket(zmq.ROUTER)
        self.replay_endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.router.bind(self.replay_endpoint)
        self.buffer: list[tuple[int, bytes]] = []
        self.replays: list[int] = []
        self._serving = asyncio.create_task(self._serve_replays())

    async def publish(self, seq: int, *events: dict, send: bool = True) -> None:
        payload = msgpack.packb([1.0, list(events), 0])
        self.buffer.append((seq, payload))
        if send:  # else lost on the way (a subscriber past the high-water mark)
            await self.pub.send_multipart((b"", seq.to_bytes(8, "big"), payload))

    async def _serve_replays(self) -> None:
        while True:
            client, _, start = await self.router.recv_multipart()
            self.replays.append(int.from_bytes(start, "big"))
            for seq, payload in self.buffer:
                if seq >= int.from_bytes(start, "big"):
                    await self.router.send_multipart((client, b"", b"", seq.to_bytes(8, "big"), payload))
            await self.router.send_multipart((client, b"", b"", (-1).to_bytes(8, "big", signed=True), b""))

    async def subscribed(self) -> None:
        """Until a subscriber's subscription arrived (PUB drops what it sends before)."""
        assert (await self.pub.recv())[:1] == b"\x01"

    def restart(self) -> None:
        self.buffer.clear()

    def close(self) -> None:
        self._serving.cancel()
        self.context.destroy(linger=0)


@contextlib.asynccontextmanager
async def running(subscriber: KVEventSubscriber):
    task = asyncio.create_task(subscriber.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_lost_stretch_is_replayed_and_a_restart_clears_the_index():
    publisher = Publisher()
    index = BlockIndex(C)
    subscriber = KVEventSubscriber(index, publisher.endpoint, publisher.replay_endpoint)
    a, b, c = list(range(C)), list(range(100, 100 + C)), list(range(200, 200 + C))
    try:
        async with running(subscriber):
            await publisher.subscribed()
            await async_wait_for(lambda: publisher.replays == [0], "the subscriber asked for the buffer")
            await publisher.publish(0, stored(1, None, a))
            await publisher.publish(1, stored(2, 1, b), send=False)  # lost
            await publisher.publish(2, {"type": "BlockRemoved", "block_hashes": [9], "medium": "GPU"})
            await async_wait_for(lambda: subscriber.last_seq == 2, "batch 2 was taken")
            assert publisher.replays == [0, 1] and subscriber.stats.gaps == 1
            assert index.match(chunk_keys(a + b, C)) == 2  # the lost block came from the replay

            publisher.restart()  # a new vLLM process: sequence numbers start over, its cache is empty
            await publisher.publish(0, stored(7, None, c))
            await async_wait_for(lambda: subscriber.stats.restarts == 1, "the restart was seen")
            await async_wait_for(lambda: subscriber.last_seq == 0, "the new batch 0 was taken")
            assert index.match(chunk_keys(a + b, C)) == 0 and index.match(chunk_keys(c, C)) == 1

            await publisher.pub.send_multipart((b"", (1).to_bytes(8, "big"), b"\xc1not msgpack"))
            await publisher.publish(2, stored(8, 7, a))
            await async_wait_for(lambda: subscriber.last_seq == 2, "the batch after the malformed one")
            assert subscriber.stats.malformed == 1 and index.match(chunk_keys(c + a, C)) == 2
    finally:
        publisher.close()

