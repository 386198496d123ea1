"""`service_tier` (Codex's Fast mode sends "priority") is the replica's request `priority`, echoed
as the tier that served it, and a session's burst waits behind other sessions' turns: a
generation's priority is its tier's band plus its rank among its session's generations in
flight (gateway/core/service_tier.py). Order is asserted on what a scripted replica receives."""

from __future__ import annotations

import httpx
import pytest

from gateway.core.service_tier import BAND
from tests.support.fake_vllm import Script
from tests.support.holder import Holder
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.stack import fake_stack
from tests.support.waiting import DEADLINE, wait_for

GENERATE = "/inference/v1/generate"


@pytest.fixture(scope="module")
def stack(qwen_tokenizer_dir):
    with fake_stack(qwen_tokenizer_dir, served_model_name="tiny-qwen3") as stack:
        yield stack


@pytest.fixture
def fake(stack):
    stack.fake.reset()
    return stack.fake


def _responses(url: str, **fields) -> httpx.Response:
    return httpx.post(url + "/v1/responses", json={"model": "tiny-qwen3", "input": "hi", **fields}, timeout=DEADLINE)


@pytest.mark.parametrize(("asked", "served", "priority"), [
    (None, "default", 0), ("auto", "default", 0), ("default", "default", 0), ("scale", "default", 0),
    ("flex", "flex", BAND), ("priority", "priority", -BAND), ("fast", "priority", -BAND),
])
def test_the_tier_is_the_replicas_priority_and_is_echoed(stack, fake, tokenizer, asked, served, priority):
    fake.queue(Script(ids(tokenizer, "Hi.") + [IM_END]))
    response = _responses(stack.url, **({} if asked is None else {"service_tier": asked}))
    assert response.status_code == 200, response.text
    assert response.json()["service_tier"] == served
    assert fake.bodies(GENERATE)[-1]["priority"] == priority


def test_chat_completions_echo_the_tier_once_one_is_asked_for(stack, fake, tokenizer):
    chat = {"model": "tiny-qwen3", "messages": [{"role": "user", "content": "hi"}]}
    fake.queue(Script(ids(tokenizer, "Hi.") + [IM_END]), Script(ids(tokenizer, "Hi.") + [IM_END]))
    fast = httpx.post(stack.url + "/v1/chat/completions", json={**chat, "service_tier": "fast"}, timeout=DEADLINE)
    plain = httpx.post(stack.url + "/v1/chat/completions", json=chat, timeout=DEADLINE)
    assert fast.json()["service_tier"] == "priority" and "service_tier" not in plain.json()
    assert [body["priority"] for body in fake.bodies(GENERATE)] == [-BAND, 0]


def test_an_unknown_tier_is_a_400_naming_it(stack, fake):
    response = _responses(stack.url, service_tier="turbo")
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "service_tier"
    assert fake.bodies(GENERATE) == []


def hold(url: str, **fields) -> Holder:
    """A streaming response whose replica stream hangs until `release()` (the client leaves)."""
    return Holder(url + "/v1/responses", {"model": "tiny-qwen3", "input": "hi", "stream": True, **fields})


def test_a_sessions_burst_queues_behind_another_sessions_turn(stack, fake, tokenizer):
    fake.queue(*[Script(ids(tokenizer, "busy"), hang=True) for _ in range(5)])
    burst = [hold(stack.url, prompt_cache_key="agent-a") for _ in range(3)]
    other = hold(stack.url, prompt_cache_key="agent-b")
    fast = hold(stack.url, prompt_cache_key="agent-a", service_tier="priority")
    # a's generations in flight rank 0, 1, 2; b's first is 0 again (vLLM serves it before a's
    # waiting ones), and a priority-tier request goes before every default one.
    assert [body["priority"] for body in fake.bodies(GENERATE)] == [0, 1, 2, 0, -BAND + 3]
    burst[0].release()
    wait_for(lambda: fake.disconnected)  # the gateway saw it end: a has three in flight again
    fake.queue(Script(ids(tokenizer, "Hi.") + [IM_END]))
    assert _responses(stack.url, prompt_cache_key="agent-a").status_code == 200
    assert fake.bodies(GENERATE)[-1]["priority"] == 3
    for held in (*burst[1:], other, fast):
        held.release()
    wait_for(lambda: len(fake.disconnected) == 5)
    fake.queue(Script(ids(tokenizer, "Hi.") + [IM_END]))
    assert _responses(stack.url, prompt_cache_key="agent-a").status_code == 200
    assert fake.bodies(GENERATE)[-1]["priority"] == 0  # nothing of a's left in flight


def test_an_explicit_vllm_priority_is_sent_as_given(stack, fake, tokenizer):
    fake.queue(Script(ids(tokenizer, "Hi.") + [IM_END]))
    chat = {"model": "tiny-qwen3", "messages": [{"role": "user", "content": "hi"}], "priority": 7,
            "service_tier": "priority"}
    assert httpx.post(stack.url + "/v1/chat/completions", json=chat, timeout=DEADLINE).status_code == 200
    assert fake.bodies(GENERATE)[-1]["priority"] == 7
