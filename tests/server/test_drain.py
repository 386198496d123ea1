"""SIGTERM on a real `vllm-gateway serve` process: drain, then exit.

In flight at the signal: a short SSE stream (finishes within --drain-timeout), a long SSE
stream, a long WebSocket response and a long non-streaming (JSON) response (outlive it), and
an idle WebSocket.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.gateway_process import gateway_process
from tests.support.qwen3_tokens import IM_END

WORD = 9707  # "Hello"
DRAIN_TIMEOUT = 4.0


@pytest.fixture
def gateway(qwen_tokenizer_dir, tmp_path: Path):
    with FakeVLLM() as fake, gateway_process(qwen_tokenizer_dir, [fake.url], tmp_path / "gateway.log",
                                             "--drain-timeout", str(DRAIN_TIMEOUT)) as (url, process):
        yield url, process, fake


async def sse_stream(client: httpx.AsyncClient, url: str, started: asyncio.Event) -> list[str]:
    body = {"model": "tiny-qwen3", "input": "Talk", "stream": True}
    types = []
    async with client.stream("POST", url + "/v1/responses", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                types.append(json.loads(line[5:])["type"])
                if types[-1] == "response.output_text.delta":
                    started.set()
    return types


async def ws_response(ws, started: asyncio.Event) -> tuple[list[dict], int | None]:
    await ws.send(orjson.dumps({"type": "response.create", "model": "tiny-qwen3", "input": "Talk"}).decode())
    events = []
    try:
        async for frame in ws:
            events.append(orjson.loads(frame))
            if events[-1]["type"] == "response.output_text.delta":
                started.set()
    except ConnectionClosed:
        pass
    return events, ws.close_code


async def test_sigterm_drains_streams_then_closes_sockets_going_away(gateway):
    url, process, fake = gateway
    ws_url = url.replace("http://", "ws://") + "/v1/responses"
    long = Script([WORD] * 2000 + [IM_END], delay=0.02)  # ~40 s: outlives the drain deadline
    short = Script([WORD] * 60 + [IM_END], delay=0.02)  # ~1.2 s: finishes within it
    async with httpx.AsyncClient(timeout=60) as client, connect(ws_url) as busy_ws, connect(ws_url) as idle_ws:
        started = [asyncio.Event() for _ in range(3)]
        fake.queue(long)
        long_sse = asyncio.create_task(sse_stream(client, url, started[0]))
        await started[0].wait()
        fake.queue(long)
        long_ws = asyncio.create_task(ws_response(busy_ws, started[1]))
        await started[1].wait()
        fake.queue(long)
        long_json = asyncio.create_task(client.post(url + "/v1/responses", json={"model": "tiny-qwen3", "input": "x"}))
        while len(fake.bodies("/inference/v1/generate")) < 3:  # the JSON request's generation runs
            await asyncio.sleep(0.02)
        fake.queue(short)
        short_sse = asyncio.create_task(sse_stream(client, url, started[2]))
        await started[2].wait()

        process.send_signal(signal.SIGTERM)
        while (await client.get(url + "/ready")).status_code == 200:
            await asyncio.sleep(0.05)
        refused = await client.post(url + "/v1/responses", json={"model": "tiny-qwen3", "input": "x"})
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "server_shutting_down"
        with pytest.raises(InvalidStatus) as denied:
            async with connect(ws_url):
                pass
        assert denied.value.response.status_code == 503
        assert not short_sse.done()

        short_types = await short_sse
        # 60 tokens, 20 ms apart: one delta each, unless a stalled gateway read several at once
        assert short_types[-1] == "response.completed" and 1 <= short_types.count("response.output_text.delta") <= 60
        long_types = await long_sse
        assert long_types[-1] == "response.failed"  # a proper end, not a cut stream
        assert "response.completed" not in long_types
        json_answer = await long_json  # a non-streaming client waiting at the deadline: a JSON 503
        assert json_answer.status_code == 503 and json_answer.json()["error"]["code"] == "server_shutting_down", json_answer.text
        ws_events, close_code = await long_ws
        assert ws_events[-1]["type"] == "response.failed"
        assert "shutting down" in ws_events[-1]["response"]["error"]["message"]
        assert close_code == 1001
        with pytest.raises(ConnectionClosed):
            await idle_ws.recv()
        assert idle_ws.close_code == 1001

    assert await asyncio.to_thread(process.wait, 30) == 0
    assert len(fake.aborted) == 3  # the three long generations were aborted upstream
    assert len(fake.completed) == 1
