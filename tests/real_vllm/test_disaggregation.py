"""Prefill/decode disaggregation on two real vLLM-CPU replicas with NixlConnector: a prefill
replica (kv_producer) computes the prompt's KV cache, the decode replica (kv_consumer) pulls it
over NIXL (UCX, host memory) and generates. Through the gateway the greedy output ids equal
those of the decode replica prefilling alone (a gateway without roles in front of it), over
Responses and Chat, streamed and not, and on a session's second turn; a turn whose prefill
replica dies between the legs still completes, exactly. The scripted protocol cases:
tests/upstream/test_disaggregation.py."""

from __future__ import annotations

import json
import os
import random
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from gateway.core.settings import Settings
from gateway.ops.vllm_process import VLLMError, VLLMProcess, free_port
from gateway.pipeline.runtime import Runtime
from gateway.server.app import build_runtime
from gateway.upstream import disaggregation, replica_load
from tests.support.gateway_server import running_gateway
from tests.support.waiting import PROCESS_START, async_wait_for, wait_for

pytestmark = pytest.mark.vllm

MODEL = "tiny-qwen3"
MIN_NEW = 128  # one vLLM-CPU block: the test prompts (200-700 tokens) are all split
WORDS = ("agent", "buffer", "cache", "decode", "engine", "file", "gateway", "handler", "index", "json", "kernel",
         "latency", "module", "node", "offset", "patch", "queue", "replica", "stream", "token", "update", "vector",
         "worker", "yield", "zero", "the", "of", "and", "to", "in", "is", "for", "with", "on", "as", "by")


def text(seed: int, n_words: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def nixl_replica(model_dir, role: str, cpu: int, logs) -> VLLMProcess:
    # A lease far beyond the tests' deadlines: blocks a prefill replica kept for nobody would show.
    config = json.dumps({"kv_connector": "NixlConnector", "kv_role": role,
                         "kv_connector_extra_config": {"kv_lease_duration": 600}})
    env = {"VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port()),
           "VLLM_SERVER_DEV_MODE": "1"}  # /reset_prefix_cache: each comparison prefills afresh
    return VLLMProcess(model_dir, served_model_name=MODEL, max_model_len=4096, enforce_eager=True, cpus=str(cpu),
                       extra_args=("--kv-transfer-config", config), env=env, log_path=logs / f"vllm-{role}.log")


@pytest.fixture(scope="module")
def replicas(qwen_model_dir, tmp_path_factory) -> Iterator[tuple[VLLMProcess, VLLMProcess]]:
    """(prefill, decode) replicas, each on its own core."""
    logs = tmp_path_factory.mktemp("pd-vllm")
    cpus = sorted(os.sched_getaffinity(0))
    started = [nixl_replica(qwen_model_dir, "kv_producer", cpus[0], logs),
               nixl_replica(qwen_model_dir, "kv_consumer", cpus[-1], logs)]
    try:
        for process in started:
            process.start()
        for process in started:
            process.wait_ready_sync(timeout=PROCESS_START * 5)
    except VLLMError as exc:
        for process in started:
            process.stop()
        pytest.fail(str(exc))
    yield started[0], started[1]
    for process in started:
        process.stop()


@dataclass
class Gateway:
    url: str
    runtime: Runtime


# A loaded 2-core box (the whole suite beside these replicas) can starve a replica's API server
# for tens of seconds: these tests check what the legs compute, so no leg may give up on time.
PATIENT = {"upstream_header_timeout": 600.0, "pd_prefill_timeout": 600.0}
CLIENT_TIMEOUT = 900.0


@pytest.fixture(scope="module")
def split(replicas, qwen_model_dir) -> Iterator[Gateway]:
    """The gateway with a prefill and a decode replica."""
    prefill, decode = replicas
    settings = Settings(model=str(qwen_model_dir), upstreams=[f"prefill={prefill.url}", f"decode={decode.url}"],
                        pd_min_new_tokens=MIN_NEW, health_backoff_max=2.0, **PATIENT)
    runtime = build_runtime(settings)
    with running_gateway(settings, runtime) as url:
        gateway = Gateway(url, runtime)
        # The pair's first transfer also makes the NIXL handshake: done here, not in a test's turn.
        wait_routable(gateway)
        httpx.post(url + "/v1/completions", timeout=CLIENT_TIMEOUT,
                   json={"model": MODEL, "prompt": list(range(1000, 1300)), "max_tokens": 1})
        yield gateway


@pytest.fixture(scope="module")
def alone(replicas, qwen_model_dir) -> Iterator[Gateway]:
    """The gateway with the decode replica alone: it prefills every prompt itself (the reference)."""
    settings = Settings(model=str(qwen_model_dir), upstreams=[replicas[1].url], **PATIENT)
    runtime = build_runtime(settings)
    with running_gateway(settings, runtime) as url:
        yield Gateway(url, runtime)


def reset_caches(*processes: VLLMProcess) -> None:
    """Empty the replicas' prefix caches (refused while a request, or a transfer, holds blocks)."""
    for process in processes:
        url = process.url + "/reset_prefix_cache"
        wait_for(lambda url=url: httpx.post(url, timeout=CLIENT_TIMEOUT).status_code == 200,
                 f"{process.url} emptied its prefix cache", interval=0.2)


def chat(url: str, content: str, stream: bool) -> tuple[list[int], list[int]]:
    """(prompt ids, output ids) of a greedy chat completion."""
    body = {"model": MODEL, "messages": [{"role": "system", "content": "You are terse."},
                                         {"role": "user", "content": content}],
            "temperature": 0, "max_tokens": 24, "return_token_ids": True, "stream": stream}
    if not stream:
        answer = httpx.post(url + "/v1/chat/completions", json=body, timeout=CLIENT_TIMEOUT)
        assert answer.status_code == 200, answer.text
        return answer.json()["prompt_token_ids"], answer.json()["choices"][0]["token_ids"]
    prompt, output = [], []
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=CLIENT_TIMEOUT) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            prompt = chunk.get("prompt_token_ids") or prompt
            for choice in chunk["choices"]:
                output += choice.get("token_ids") or choice["delta"].get("token_ids") or []
    return prompt, output


def responses(url: str, conversation: list | str, stream: bool, **extra) -> dict:
    """The finished Response (with its prompt and output ids) of a greedy turn."""
    body = {"model": MODEL, "input": conversation, "temperature": 0, "max_output_tokens": 24,
            "return_token_ids": True, "stream": stream, **extra}
    if not stream:
        answer = httpx.post(url + "/v1/responses", json=body, timeout=CLIENT_TIMEOUT)
        assert answer.status_code == 200, answer.text
        return answer.json()
    with httpx.stream("POST", url + "/v1/responses", json=body, timeout=CLIENT_TIMEOUT) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert events[-1]["type"] in ("response.completed", "response.incomplete"), events[-1]
    return events[-1]["response"]


def decisions(gateway: Gateway) -> dict[str, int]:
    return dict(gateway.runtime.pool.split_stats.decisions)


def fallbacks(gateway: Gateway) -> dict[str, int]:
    return dict(gateway.runtime.pool.split_stats.fallbacks)


def new_fallbacks(gateway: Gateway, before: dict[str, int]) -> dict[str, int]:
    """The fallbacks since `before` (a copy of `fallbacks(gateway)`)."""
    return {reason: n - before.get(reason, 0) for reason, n in fallbacks(gateway).items() if n > before.get(reason, 0)}


def wait_routable(gateway: Gateway) -> None:
    """Both replicas routable: one a slow health check ejected is back (a split needs both)."""
    wait_for(lambda: all(r.routable for r in gateway.runtime.pool.replicas), "both replicas routable",
             timeout=PROCESS_START, interval=0.2)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_greedy_ids_disaggregated_equal_the_decode_replica_alone(split, alone, replicas, stream):
    fell_back = fallbacks(split)
    for seed, n_words in ((1 + 10 * stream, 180), (2 + 10 * stream, 420), (3 + 10 * stream, 650)):
        reset_caches(*replicas)  # (prompts new to the gateway's prefix index too: each one is split)
        wait_routable(split)
        before = decisions(split).get("split", 0)
        prompt, through_split = chat(split.url, text(seed, n_words), stream)
        assert decisions(split).get("split", 0) == before + 1  # a prefill leg, then the pull
        reset_caches(*replicas)
        prompt_alone, reference = chat(alone.url, text(seed, n_words), stream)
        assert prompt == prompt_alone and len(prompt) > MIN_NEW
        assert through_split == reference and len(reference) > 1
    assert new_fallbacks(split, fell_back) == {}


@pytest.mark.parametrize("stream", [False, True])
def test_responses_greedy_ids_disaggregated_equal_the_decode_replica_alone(split, alone, replicas, stream):
    fell_back = fallbacks(split)
    for seed, n_words in ((4 + 10 * stream, 250), (5 + 10 * stream, 540)):
        reset_caches(*replicas)
        wait_routable(split)
        before = decisions(split).get("split", 0)
        through_split = responses(split.url, text(seed, n_words), stream)
        assert decisions(split).get("split", 0) == before + 1
        reset_caches(*replicas)
        reference = responses(alone.url, text(seed, n_words), stream)
        assert through_split["prompt_token_ids"] == reference["prompt_token_ids"]
        assert through_split["output_token_ids"] == reference["output_token_ids"]
    assert new_fallbacks(split, fell_back) == {}


SHELL = {"type": "function", "name": "shell", "description": "Runs a shell command and returns its output.",
         "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                        "required": ["command"], "additionalProperties": False}, "strict": False}


def test_a_codex_shaped_sessions_second_turn_is_exact_and_not_split(split, alone, replicas):
    """Codex's shape: instructions and tools, the whole history resent each turn, streamed, not
    stored, one prompt_cache_key. The first turn is split; the second adds a few tokens to a
    history the decode replica holds (it pulled it), so the decode replica prefills them itself
    — and both turns' prompt and output ids are those of the decode replica alone."""
    reset_caches(*replicas)
    codex = {"instructions": text(9, 200), "tools": [SHELL], "store": False}
    history = [{"type": "message", "role": "user", "content": text(6, 400)}]
    turns = {}
    for name, gateway in (("split", split), ("alone", alone)):
        conversation = list(history)
        wait_routable(gateway)
        before = decisions(gateway)
        first = responses(gateway.url, conversation, True, prompt_cache_key=f"pd-{name}", **codex)
        conversation += [*first["output"], {"type": "message", "role": "user", "content": "And then?"}]
        second = responses(gateway.url, conversation, True, prompt_cache_key=f"pd-{name}", **codex)
        turns[name] = (first, second, before)
        reset_caches(*replicas)
    (first, second, before), (first_alone, second_alone, _) = turns["split"], turns["alone"]
    assert [turn["prompt_token_ids"] for turn in (first, second)] == \
        [turn["prompt_token_ids"] for turn in (first_alone, second_alone)]
    assert [turn["output_token_ids"] for turn in (first, second)] == \
        [turn["output_token_ids"] for turn in (first_alone, second_alone)]
    after = decisions(split)
    assert after.get("split", 0) == before.get("split", 0) + 1
    assert after.get("cached", 0) == before.get("cached", 0) + 1  # the second turn: the skip decision


def test_token_in_completions_disaggregated_equal_the_decode_replica_alone(split, alone, replicas):
    prompt = list(range(2000, 2300))
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 16, "temperature": 0, "return_token_ids": True}
    reset_caches(*replicas)
    wait_routable(split)
    through_split = httpx.post(split.url + "/v1/completions", json=body, timeout=CLIENT_TIMEOUT).json()
    reset_caches(*replicas)
    reference = httpx.post(alone.url + "/v1/completions", json=body, timeout=CLIENT_TIMEOUT).json()
    assert through_split["choices"][0]["token_ids"] == reference["choices"][0]["token_ids"]
    assert through_split["kv_transfer_params"] is None  # the decode leg's answer, as the client's would be


def kv_usage(process: VLLMProcess) -> float:
    return replica_load.parse(httpx.get(process.url + "/metrics", timeout=CLIENT_TIMEOUT).text).kv_usage


def test_a_client_leaving_mid_decode_leaves_no_blocks_held(split, replicas):
    reset_caches(*replicas)
    body = {"model": MODEL, "prompt": list(range(3000, 3400)), "max_tokens": 3000, "ignore_eos": True,
            "temperature": 0, "stream": True, "return_token_ids": True}
    wait_routable(split)
    before = decisions(split).get("split", 0)
    with httpx.stream("POST", split.url + "/v1/completions", json=body, timeout=CLIENT_TIMEOUT) as r:
        events = 0
        for line in r.iter_lines():
            events += line.startswith("data: {")
            if events == 3:
                break  # the client leaves mid-decode
    assert decisions(split).get("split", 0) == before + 1
    wait_for(lambda: kv_usage(replicas[0]) == 0.0 and kv_usage(replicas[1]) == 0.0,
             "both replicas held no blocks", interval=0.5)


def test_a_prefill_replica_killed_between_the_legs_still_completes_the_turn(split, alone, replicas, monkeypatch):
    """Last in the module: the prefill replica answers its leg, then dies before the decode
    replica pulls; the pull fails, and the turn is prefilled locally before any token went out."""
    prefill, decode = replicas
    reset_caches(*replicas)
    content = text(7, 400)
    _, reference = chat(alone.url, content, True)
    reset_caches(decode)
    answered = disaggregation._prefill

    async def then_die(*args, **kwargs):
        params = await answered(*args, **kwargs)
        os.killpg(prefill.pid, signal.SIGKILL)
        await async_wait_for(lambda: prefill.returncode is not None, "the prefill replica to die")
        return params

    monkeypatch.setattr(disaggregation, "_prefill", then_die)
    wait_routable(split)
    fell_back = fallbacks(split)
    _, through_split = chat(split.url, content, True)
    assert through_split == reference
    assert new_fallbacks(split, fell_back) in ({"pull_failed": 1}, {"decode_refused": 1})
    monkeypatch.undo()
    # With the prefill replica gone, the next long turns are the decode replica's alone.
    _, again = chat(split.url, text(8, 400), False)
    assert again
