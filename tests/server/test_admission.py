"""--max-concurrent-requests: a request beyond the limit gets a 429 with Retry-After at once.

Slots are held for the whole response (a stream until its last event), shared by HTTP and
WebSocket responses, and freed by a client that leaves. No reachable replica is a 503 that
also names a delay.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from gateway.core.settings import Settings
from gateway.server._admission import Admission
from tests.support.fake_vllm import Script
from tests.support.gateway_server import free_port, running_gateway
from tests.support.holder import Holder
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.stack import fake_stack
from tests.support.waiting import DEADLINE, wait_for

BODY = {"model": "tiny-qwen3", "input": "hi", "stream": True}


@pytest.fixture
def stack(qwen_tokenizer_dir):
    with fake_stack(qwen_tokenizer_dir, served_model_name="tiny-qwen3", max_concurrent_requests=1) as stack:
        yield stack


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/chat/completions"])
def test_a_request_beyond_the_limit_is_a_429_with_retry_after(stack, tokenizer, path):
    fake, url = stack.fake, stack.url
    fake.queue(Script(ids(tokenizer, "busy"), hang=True), Script(ids(tokenizer, "Hello.") + [IM_END]))
    body = BODY if path == "/v1/responses" else {"model": "tiny-qwen3", "stream": True,
                                                  "messages": [{"role": "user", "content": "hi"}]}
    holder = Holder(url + path, body)
    sent = len(fake.bodies("/inference/v1/generate"))
    refused = httpx.post(url + "/v1/responses", json=BODY)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"] == {
        "message": "The gateway is serving its limit of 1 concurrent requests; retry after 1 s.",
        "type": "rate_limit_error", "param": None, "code": "rate_limit_exceeded"}
    assert len(fake.bodies("/inference/v1/generate")) == sent  # nothing sent upstream
    # Other routes are not counted.
    assert httpx.get(url + "/v1/models").status_code == 200
    holder.release()  # the client leaves: its upstream request is aborted, its slot freed
    wait_for(lambda: fake.disconnected)
    wait_for(lambda: httpx.post(url + "/v1/responses", json={**BODY, "stream": False}).status_code != 429)
    assert fake.completed  # the retry got the slot and its answer


async def test_websocket_responses_share_the_budget(stack, tokenizer):
    fake, url = stack.fake, stack.url
    fake.queue(Script(ids(tokenizer, "busy"), hang=True), Script(ids(tokenizer, "Hello.") + [IM_END]))
    holder = Holder(url + "/v1/responses", BODY)
    create = orjson.dumps({"type": "response.create", "model": "tiny-qwen3", "input": "hi"}).decode()
    async with connect(url.replace("http://", "ws://") + "/v1/responses") as ws:
        await ws.send(create)
        error = orjson.loads(await ws.recv())
        assert error["type"] == "error" and error["status"] == 429
        assert error["error"]["code"] == "rate_limit_exceeded"
        holder.release()  # its slot is free once the gateway has seen it leave
        deadline = time.monotonic() + DEADLINE
        while True:
            await ws.send(create)
            events = [orjson.loads(await ws.recv())]
            if events[0]["type"] != "error":
                break
            assert events[0]["status"] == 429 and time.monotonic() < deadline
            await asyncio.sleep(0.05)
        while events[-1]["type"] not in ("response.completed", "error"):
            events.append(orjson.loads(await ws.recv()))
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Hello."


def test_no_reachable_replica_is_a_503_with_retry_after(qwen_tokenizer_dir):
    settings = Settings(model=str(qwen_tokenizer_dir), upstreams=[f"http://127.0.0.1:{free_port()}"],
                        served_model_name="tiny-qwen3")
    with running_gateway(settings) as url:
        response = httpx.post(url + "/v1/responses", json=BODY)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == "upstream_unavailable"


def test_a_full_gateway_serves_its_queue_by_tier_then_fairly_between_sessions(qwen_tokenizer_dir, tokenizer):
    """--max-queued-requests: beyond the limit requests wait, and a freed slot goes to the first
    of them in order: service tier, then how many of its session's requests were already in or
    waiting, then arrival. Session a holds the slot and queues a second request before b's
    first: b still goes first."""
    with fake_stack(qwen_tokenizer_dir, served_model_name="tiny-qwen3", max_concurrent_requests=1,
                    max_queued_requests=4) as stack:
        fake, url, admission = stack.fake, stack.url, stack.runtime.gate.admission
        fake.queue(Script(ids(tokenizer, "busy"), hang=True),
                   *[Script(ids(tokenizer, "Hello.") + [IM_END]) for _ in range(4)])
        holder = Holder(url + "/v1/responses", {**BODY, "prompt_cache_key": "a"})
        answers: dict[str, int] = {}

        def ask(name: str, **fields) -> threading.Thread:
            body = {"model": "tiny-qwen3", "input": f"I am {name}.", "prompt_cache_key": name[0], **fields}
            thread = threading.Thread(target=lambda: answers.__setitem__(
                name, httpx.post(url + "/v1/responses", json=body, timeout=DEADLINE).status_code))
            thread.start()
            return thread

        threads: list[threading.Thread] = []
        for name, fields in [("a2", {}), ("b1", {}), ("c1", {"service_tier": "flex"}),
                             ("d1", {"service_tier": "priority"})]:
            threads.append(ask(name, **fields))
            wait_for(lambda: admission.waiting == len(threads))  # queued in this order
        refused = httpx.post(url + "/v1/responses", json=BODY, timeout=DEADLINE)
        assert refused.status_code == 429  # the queue is full too
        holder.release()
        for thread in threads:
            thread.join(DEADLINE)
        assert answers == {"a2": 200, "b1": 200, "c1": 200, "d1": 200}
        served = [tokenizer.decode(body["token_ids"]) for body in fake.bodies("/inference/v1/generate")[1:]]
        assert [next(name for name in answers if f"I am {name}." in text) for text in served] == ["d1", "b1", "a2", "c1"]
        wait_for(lambda: admission.active == 0 and admission.waiting == 0)


async def test_a_waiting_request_that_leaves_gives_up_its_place():
    admission = Admission(1, queue=2)
    await admission.enter("a", "default")
    gone = asyncio.create_task(admission.enter("b", "priority"))
    stays = asyncio.create_task(admission.enter("c", "default"))
    await asyncio.sleep(0)
    assert admission.waiting == 2
    gone.cancel()
    await asyncio.sleep(0)
    assert admission.waiting == 1
    admission.leave("a")  # the slot goes to c, the one still waiting
    await stays
    assert (admission.active, admission.waiting) == (1, 0)
    admission.leave("c")
    assert admission.active == 0
