"""Two scripted replicas behind the real gateway: retry before the first token, clean
failure after it, ejection of an unreachable replica."""

from __future__ import annotations

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.sse import sse_events
from tests.support.stack import fake_stack
from tests.support.waiting import wait_for

GENERATE = "/inference/v1/generate"
FINAL = ("response.completed", "response.incomplete", "response.failed", "error")


@pytest.fixture
def stack(qwen_tokenizer_dir):
    with fake_stack(qwen_tokenizer_dir, replicas=2, health_interval=0.1, health_backoff_max=0.2) as stack:
        yield stack


def test_a_stream_cut_mid_way_fails_cleanly_and_keeps_the_session_cache(stack, tokenizer):
    url, runtime, fakes = stack.url, stack.runtime, {fake.url: fake for fake in stack.fakes}
    home = fakes[runtime.pool.pick("thread-1").url]  # the session's replica
    answer = ids(tokenizer, "Hello there") + [IM_END]
    home.queue(Script(answer), Script(ids(tokenizer, "I am fine, thanks") + [IM_END], drop_after=2))
    history = [{"type": "message", "role": "user", "content": "Greet"}]
    body = {"model": "tiny-qwen3", "input": history, "prompt_cache_key": "thread-1", "stream": True}
    with httpx.stream("POST", url + "/v1/responses", json=body) as r:
        assert sse_events(r)[-1]["type"] == "response.completed"
    cached = runtime.store.sessions.get("thread-1")
    assert list(cached.state.tokens)[-len(answer):] == answer

    history += [{"type": "message", "role": "assistant", "content": "Hello there"},
                {"type": "message", "role": "user", "content": "How are you?"}]
    with httpx.stream("POST", url + "/v1/responses", json={**body, "input": history}) as r:
        events = sse_events(r)
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == tokenizer.decode(ids(tokenizer, "I am fine, thanks")[:2])  # what came before the cut
    assert events[-1]["type"] == "response.failed"
    error = events[-1]["response"]["error"]  # OpenAI's ResponseErrorCode, the gateway's code in the message
    assert error["code"] == "server_error" and error["message"].startswith("upstream_error: ")
    # what broke goes to the log; the client reads a stable message without the replica's address
    assert error["message"] == "upstream_error: The model server failed while generating."
    assert runtime.store.sessions.get("thread-1") is cached  # the failed turn did not replace it
    assert len(home.bodies(GENERATE)) == 2  # not retried: output had reached the client
    # The replica's /health still answers, so the check the broken stream triggered keeps it.
    checked = home.health_checks
    wait_for(lambda: home.health_checks >= checked + 2, "two more health checks of the replica")
    assert all(r.healthy for r in runtime.pool.replicas)


async def test_a_stream_cut_over_websocket_is_a_failed_response_and_the_socket_carries_on(stack, tokenizer):
    url, runtime, fakes = stack.url, stack.runtime, {fake.url: fake for fake in stack.fakes}
    async with connect(url.replace("http://", "ws://") + "/v1/responses") as ws:
        body = {"type": "response.create", "model": "tiny-qwen3", "input": "Greet", "prompt_cache_key": "ws-1"}
        home = fakes[runtime.pool.pick("ws-1").url]
        home.queue(Script(ids(tokenizer, "Hello there") + [IM_END], drop_after=1),
                   Script(ids(tokenizer, "Hi") + [IM_END]))
        for expected in ("response.failed", "response.completed"):
            await ws.send(orjson.dumps(body).decode())
            events = []
            while not events or events[-1]["type"] not in FINAL:
                events.append(orjson.loads(await ws.recv()))
            assert events[-1]["type"] == expected
        assert runtime.store.sessions.get("ws-1") is not None  # only the completed turn stored tokens


def test_refused_or_busy_before_the_first_token_is_retried_on_the_other_replica(stack, tokenizer):
    url, runtime, fakes = stack.url, stack.runtime, {fake.url: fake for fake in stack.fakes}
    home = runtime.pool.pick("thread-2")
    other = next(r for r in runtime.pool.replicas if r is not home)
    fakes[home.url].queue(Script([], status=503, error_message="busy"))
    fakes[other.url].queue(Script(ids(tokenizer, "Hi") + [IM_END]))
    body = {"model": "tiny-qwen3", "input": "Greet", "prompt_cache_key": "thread-2"}
    response = httpx.post(url + "/v1/responses", json=body)
    assert response.status_code == 200 and response.json()["output"][0]["content"][0]["text"] == "Hi"
    assert len(fakes[home.url].bodies(GENERATE)) == len(fakes[other.url].bodies(GENERATE)) == 1
    assert home.healthy  # busy is not dead

    fakes[home.url].__exit__(None, None, None)  # the replica's server is gone: connections are refused
    texts = []
    for i in range(6):
        fakes[other.url].queue(Script(ids(tokenizer, f"n{i}") + [IM_END]))
        answer = httpx.post(url + "/v1/responses", json={**body, "prompt_cache_key": f"thread-{i}"})
        assert answer.status_code == 200
        texts.append(answer.json()["output"][0]["content"][0]["text"])
    assert texts == [f"n{i}" for i in range(6)]  # none lost
    wait_for(lambda: not home.healthy)
    states = {r["url"]: r["state"] for r in httpx.get(url + "/health").json()["replicas"]}
    assert states == {home.url: "ejected", other.url: "ready"}
    assert httpx.get(url + "/ready").status_code == 200
