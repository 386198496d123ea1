"""kill -9 of a replica process mid-stream, behind a real `vllm-gateway serve` process.

Two replicas (the bench's token server, each its own process, 20 ms a token), streams on
both; one is SIGKILLed while they run. The streams it carried end with a clean
`response.failed` (not a cut stream), the others complete, the pool stops routing to it,
and every later request is served by the survivor.
"""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest

from bench import procs
from tests.support.gateway_process import gateway_process

IM_END = 151645
TOKENS = [9707] * 150 + [IM_END]  # "Hello" × 150: ~3 s a stream
MODEL = "tiny-qwen3"


@pytest.fixture
def two_replicas(qwen_tokenizer_dir, tmp_path):
    with procs.token_server(MODEL, TOKENS, step_ms=20, cpu=None) as doomed, \
            procs.token_server(MODEL, TOKENS, step_ms=20, cpu=None) as survivor, \
            gateway_process(qwen_tokenizer_dir, [doomed.url, survivor.url], tmp_path / "gateway.log",
                            "--log-level", "warning") as (url, _):
        yield url, doomed, survivor


async def _stream(client: httpx.AsyncClient, started: asyncio.Event) -> list[str]:
    types = []
    body = {"model": MODEL, "input": "Talk", "stream": True}
    async with client.stream("POST", "/v1/responses", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                types.append(json.loads(line[5:])["type"])
                if types[-1] == "response.output_text.delta":
                    started.set()
    return types


def _gauge(metrics: str, name: str, replica: str) -> float:
    [value] = re.findall(rf'^{name}{{replica="{re.escape(replica)}"}} (\S+)$', metrics, re.MULTILINE)
    return float(value)


async def test_a_replica_killed_mid_stream_fails_its_streams_cleanly_and_is_ejected(two_replicas):
    url, doomed, survivor = two_replicas
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        started = [asyncio.Event() for _ in range(4)]
        streams = [asyncio.create_task(_stream(client, event)) for event in started]
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in started)), 30)
        metrics = (await client.get("/metrics")).text
        on_doomed = int(_gauge(metrics, "gateway_replica_inflight", doomed.url))
        assert on_doomed >= 1 and int(_gauge(metrics, "gateway_replica_inflight", survivor.url)) >= 1

        doomed.popen.kill()
        ends = [types[-1] for types in await asyncio.gather(*streams)]
        assert sorted(ends) == sorted(["response.failed"] * on_doomed + ["response.completed"] * (4 - on_doomed))

        for _ in range(4):  # the survivor serves what follows, streamed or not
            answer = await client.post("/v1/responses", json={"model": MODEL, "input": "Again"})
            assert answer.status_code == 200 and answer.json()["status"] == "completed"
        metrics = (await client.get("/metrics")).text
        assert _gauge(metrics, "gateway_replica_healthy", doomed.url) == 0
        assert _gauge(metrics, "gateway_replica_healthy", survivor.url) == 1
        assert _gauge(metrics, "gateway_replica_inflight", survivor.url) == 0
