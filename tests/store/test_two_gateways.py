"""Two gateways on one real Redis in front of one fake vLLM: any of them continues any turn exactly.

The history carries no reasoning (no blob can help) and the model's tool calls are tokenized
non-canonically ("l" + "s" where the tokenizer has "ls"): only the shared exact tokens keep
them, a re-tokenized history would not.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.core.settings import Settings
from gateway.pipeline.runtime import Runtime
from gateway.server._metrics import StoreMetrics
from gateway.server.app import build_runtime
from gateway.store.redis import link
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.gateway_server import running_gateway
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, TOOL_CALL, ids
from tests.support.redis_server import RedisServer

GENERATE = "/inference/v1/generate"
TOOLS = [{"type": "function", "name": "exec_command", "description": "Run a shell command",
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}} for tool in TOOLS]


@dataclass
class Gateways:
    fake: FakeVLLM
    redis: RedisServer
    urls: list[str]
    runtimes: list[Runtime]
    registries: list[CollectorRegistry]  # the state store's metrics of each gateway


@contextmanager
def two_gateways(model_dir, redis: RedisServer) -> Iterator[Gateways]:
    with ExitStack() as started:
        fake = started.enter_context(FakeVLLM(max_model_len=16384))
        urls, runtimes, registries = [], [], []
        namespace = f"t{time.monotonic_ns()}:"  # both gateways share it; the next test has its own
        for _ in range(2):
            settings = Settings(model=str(model_dir), upstreams=[fake.url], served_model_name="tiny-qwen3",
                                state_url=redis.url, state_key_prefix=namespace)
            registries.append(CollectorRegistry())
            runtimes.append(build_runtime(settings, StoreMetrics(registries[-1])))
            urls.append(started.enter_context(running_gateway(settings, runtimes[-1])))
        yield Gateways(fake, redis, urls, runtimes, registries)


@pytest.fixture
def gateways(qwen_tokenizer_dir, redis_server) -> Iterator[Gateways]:
    with two_gateways(qwen_tokenizer_dir, redis_server) as started:
        yield started


def tool_call(tokenizer, step: int) -> Script:
    """A call whose command is tokenized as the model wrote it, not as the tokenizer would."""
    return Script([TOOL_CALL, *ids(tokenizer, '\n{"name": "exec_command", "arguments": {"cmd": "'),
                   *ids(tokenizer, "l"), *ids(tokenizer, "s"), *ids(tokenizer, f' {step}"}}}}\n'), END_TOOL_CALL,
                   IM_END])


def codex_turn(url: str, history: list[dict[str, Any]], key: str = "codex-thread", **extra: Any) -> httpx.Response:
    body = {"model": "tiny-qwen3", "input": history, "tools": TOOLS, "store": False, "prompt_cache_key": key,
            **extra}
    return httpx.post(url + "/v1/responses", json=body, timeout=30)


def next_history(history: list[dict[str, Any]], answer: httpx.Response, step: int) -> list[dict[str, Any]]:
    assert answer.status_code == 200, answer.text
    output = answer.json()["output"]
    call = output[-1]
    assert call["type"] == "function_call" and json.loads(call["arguments"])["cmd"] == f"ls {step}"
    return [*history, *output, {"type": "function_call_output", "call_id": call["call_id"],
                                "output": f"file_{step}.txt"}]


FIRST = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
         {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Look around."}]}]


def assert_exact(prompts: list[list[int]], tokenizer, steps: range) -> None:
    """Every prompt starts with the one before and then the model's turn exactly as it generated
    it (its drifted "l" + "s" included), for the turns `steps`."""
    drifted = [*ids(tokenizer, "l"), *ids(tokenizer, "s")]
    assert drifted != ids(tokenizer, "ls")  # the test means something only while this drifts
    for step, before, after in zip(steps, prompts, prompts[1:], strict=False):
        generated = tool_call(tokenizer, step).token_ids
        assert after[:len(before) + len(generated)] == before + generated, step


def test_a_full_history_session_alternating_between_two_gateways_stays_exact(gateways, tokenizer):
    history = FIRST
    for step in range(6):
        gateways.fake.queue(tool_call(tokenizer, step))
        history = next_history(history, codex_turn(gateways.urls[step % 2], history), step)
    prompts = [body["token_ids"] for body in gateways.fake.bodies(GENERATE)]
    assert len(prompts) == 6
    assert_exact(prompts, tokenizer, range(6))
    for registry in gateways.registries:  # each turn read the store once: the other process had moved it on
        assert registry.get_sample_value("gateway_state_session_reads_total", {"how": "suffix"}) >= 2
        assert registry.get_sample_value("gateway_state_store_seconds_count", {"op": "session_write"}) == 3
        assert registry.get_sample_value("gateway_state_store_bytes_total", {"direction": "write"}) > 0
    assert all(runtime.store.sessions.stats.hits >= 2 for runtime in gateways.runtimes)


def test_previous_response_id_created_on_one_gateway_continues_on_the_other(gateways, tokenizer):
    gateways.fake.queue(tool_call(tokenizer, 0), tool_call(tokenizer, 1))
    first = httpx.post(gateways.urls[0] + "/v1/responses", timeout=30, json={
        "model": "tiny-qwen3", "input": FIRST, "tools": TOOLS, "store": True})
    assert first.status_code == 200, first.text
    call = first.json()["output"][-1]
    second = httpx.post(gateways.urls[1] + "/v1/responses", timeout=30, json={
        "model": "tiny-qwen3", "previous_response_id": first.json()["id"], "tools": TOOLS, "store": True,
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "a.txt"}]})
    assert second.status_code == 200, second.text
    before, after = [body["token_ids"] for body in gateways.fake.bodies(GENERATE)]
    generated = tool_call(tokenizer, 0).token_ids
    assert after[:len(before) + len(generated)] == before + generated


def test_a_rollout_with_calls_on_both_gateways_exports_whole_from_either(gateways, tokenizer):
    messages = [{"role": "user", "content": "Look around."}]
    for step in range(3):
        gateways.fake.queue(tool_call(tokenizer, step))
        answer = httpx.post(gateways.urls[step % 2] + "/v1/chat/completions", timeout=30, json={
            "model": "tiny-qwen3", "messages": messages, "tools": CHAT_TOOLS, "rollout_id": "episode-1"})
        assert answer.status_code == 200, answer.text
        message = answer.json()["choices"][0]["message"]
        messages = [*messages, {k: v for k, v in message.items() if v not in (None, [])},
                    {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": f"f{step}"}]
    prompts = [body["token_ids"] for body in gateways.fake.bodies(GENERATE)]
    exports = [httpx.get(f"{url}/v1/rollouts/episode-1").json() for url in gateways.urls]
    assert exports[0] == exports[1]
    got = exports[0]
    assert len(got["segments"]) == 1 and not any(t["non_monotonic"] for t in got["turns"])
    last = tool_call(tokenizer, 2).token_ids
    assert got["token_ids"] == prompts[-1] + last
    assert got["loss_mask"][-len(last):] == [1] * len(last)


def test_redis_restarted_mid_session_degrades_and_recovers(gateways, tokenizer, caplog, monkeypatch):
    monkeypatch.setattr(link, "RETRY_AFTER", 0.0)  # a failed store is tried again at once
    history = FIRST
    for step in range(2):
        gateways.fake.queue(tool_call(tokenizer, step))
        history = next_history(history, codex_turn(gateways.urls[step % 2], history, key="restart"), step)
    gateways.redis.stop()
    gateways.fake.queue(tool_call(tokenizer, 2))
    # unreachable: answered (a hang would end in the client's timeout), rendered in full and said so
    history = next_history(history, codex_turn(gateways.urls[0], history, key="restart"), 2)
    assert any("unreachable" in record.getMessage() for record in caplog.records)
    gateways.redis.start()  # back, empty
    for step in (3, 4):
        gateways.fake.queue(tool_call(tokenizer, step))
        history = next_history(history, codex_turn(gateways.urls[1], history, key="restart"), step)
    prompts = [body["token_ids"] for body in gateways.fake.bodies(GENERATE)]
    assert_exact(prompts[3:], tokenizer, range(3, 5))  # exact again once a turn was stored
    metrics = httpx.get(gateways.urls[0] + "/metrics").text
    assert 'gateway_non_monotonic_prompts_total{api="responses_http"} 1.0' in metrics  # the turn without Redis
    fallbacks = [registry.get_sample_value("gateway_state_store_fallbacks_total", {"reason": reason})
                 for registry in gateways.registries for reason in ("unreachable", "lost")]
    assert fallbacks[0] >= 1 and fallbacks[3] == 1  # A could not reach it; B found its session lost


def test_a_rollout_the_store_lost_answers_410_with_the_reason(gateways, tokenizer):
    gateways.fake.queue(tool_call(tokenizer, 0))
    messages = [{"role": "user", "content": "Look around."}]
    answer = httpx.post(gateways.urls[0] + "/v1/chat/completions", timeout=30, json={
        "model": "tiny-qwen3", "messages": messages, "rollout_id": "episode-lost"})
    assert answer.status_code == 200, answer.text
    gateways.redis.restart()  # empty: the rollout is lost
    again = httpx.post(gateways.urls[0] + "/v1/chat/completions", timeout=30, json={
        "model": "tiny-qwen3", "messages": messages, "rollout_id": "episode-lost"})
    assert again.status_code == 410, again.text
    assert again.json()["error"]["code"] == "rollout_gone" and "lost" in again.json()["error"]["message"]
    other = httpx.get(gateways.urls[1] + "/v1/rollouts/episode-lost")  # the tombstone is shared
    assert other.status_code == 410 and "lost" in other.json()["error"]["message"]


def test_the_store_metrics_are_on_the_gateways_metrics_endpoint(qwen_tokenizer_dir, tokenizer, redis_server):
    with FakeVLLM(max_model_len=16384) as fake:
        settings = Settings(model=str(qwen_tokenizer_dir), upstreams=[fake.url], served_model_name="tiny-qwen3",
                            state_url=redis_server.url, state_key_prefix=f"m{time.monotonic_ns()}:")
        with running_gateway(settings) as url:  # the app builds its runtime: its metrics observe the store
            history = FIRST
            for step in range(2):
                fake.queue(tool_call(tokenizer, step))
                history = next_history(history, codex_turn(url, history, key="metrics"), step)
            metrics = httpx.get(url + "/metrics").text
    assert 'gateway_state_store_seconds_count{op="session_write"} 2.0' in metrics
    assert 'gateway_state_session_reads_total{how="local"}' in metrics
    assert 'gateway_state_store_bytes_total{direction="write"}' in metrics
