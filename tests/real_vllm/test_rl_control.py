"""The RL training loop through the gateway's one URL, against two real vLLM-CPU replicas with
`VLLM_SERVER_DEV_MODE=1`: pause (keep) with a rollout streaming, a real weight change
(`reload_weights` through `/collective_rpc`, FIXTURES.md), the version label, resume — the stream
finishes with two version spans, new generations waited at the barrier, the greedy output changed
and every token carries the version that produced it; a cache reset clears the router's index.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from gateway.core.settings import Settings
from gateway.ops.vllm_process import VLLMError, VLLMProcess
from gateway.pipeline.runtime import Runtime
from gateway.server.app import build_runtime
from tests.support.examples import load_example
from tests.support.gateway_server import running_gateway
from tests.support.rl_weights import stepped_weights
from tests.support.waiting import wait_for

pytestmark = pytest.mark.vllm

MODEL = "tiny-qwen3"
LONG = 2048  # tokens: ~13 s of generation on an idle core, far longer than a pause takes to land
HELD = 3000  # tokens of the stream a keep pause freezes
PROMPT = [785, 6722, 315, 9625, 374, 12095, 13, 576, 6722, 315, 9856, 374] * 12  # 144 ids: a cached 128-token block


@pytest.fixture(scope="module")
def replicas(qwen_model_dir, tmp_path_factory) -> Iterator[list[VLLMProcess]]:
    logs = tmp_path_factory.mktemp("rl-vllm")
    cpus = sorted(os.sched_getaffinity(0))
    started = [VLLMProcess(qwen_model_dir, served_model_name=MODEL, max_model_len=4096, enforce_eager=True,
                           cpus=str(cpu), log_path=logs / f"vllm-{name}.log", env={"VLLM_SERVER_DEV_MODE": "1"})
               for name, cpu in (("a", cpus[0]), ("b", cpus[-1]))]
    try:
        for process in started:
            process.start()
        for process in started:
            process.wait_ready_sync(timeout=900)
    except VLLMError as exc:
        for process in started:
            process.stop()
        pytest.fail(str(exc))
    yield started
    for process in started:
        process.stop()


@pytest.fixture(scope="module")
def stack(replicas, qwen_model_dir) -> Iterator[tuple[str, Runtime]]:
    settings = Settings(model=str(qwen_model_dir), upstreams=[r.url for r in replicas], health_interval=0.5,
                        server_dev_mode=True)
    runtime = build_runtime(settings)
    with running_gateway(settings, runtime) as url:
        yield url, runtime


@pytest.fixture(scope="module")
def step_dirs(qwen_model_dir, tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("rl-steps")
    return [stepped_weights(qwen_model_dir, root / f"step-{step}", step) for step in (1, 2, 3)]


def call(url: str, method: str, path: str, body: dict | None = None) -> dict | None:
    response = httpx.request(method, url + path, json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response.json() if response.content else None


def greedy(url: str, max_tokens: int = 8, **extra) -> dict:
    body = {"model": MODEL, "token_ids": PROMPT, "sampling_params": {"temperature": 0.0, "max_tokens": max_tokens}}
    return call(url, "POST", "/inference/v1/generate", {**body, **extra})["choices"][0]


class Streaming(threading.Thread):
    """A streamed generate through the gateway, read on its own thread."""

    def __init__(self, url: str, max_tokens: int, rollout_id: str) -> None:
        super().__init__(daemon=True)
        self.url, self.events = url, []
        self.body = {"model": MODEL, "token_ids": PROMPT[:20], "stream": True, "rollout_id": rollout_id,
                     "sampling_params": {"temperature": 1.0, "seed": 7, "max_tokens": max_tokens, "ignore_eos": True}}

    def run(self) -> None:
        with httpx.stream("POST", self.url + "/inference/v1/generate", json=self.body, timeout=300) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    self.events.append(orjson.loads(line[6:]))

    @property
    def token_ids(self) -> list[int]:
        return [t for event in self.events for choice in event["choices"] for t in choice.get("token_ids") or ()]

    @property
    def spans(self) -> list[dict]:
        return next(c["weight_versions"] for e in self.events for c in e["choices"] if c.get("weight_versions"))


def generated(replicas: list[VLLMProcess]) -> float:
    """vLLM's own count of tokens generated so far, over the replicas (their /metrics, read directly)."""
    total = 0.0
    for replica in replicas:
        for line in httpx.get(replica.url + "/metrics", timeout=60).text.splitlines():
            if line.startswith("vllm:generation_tokens_total{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def decoding(stream: Streaming, replicas: list[VLLMProcess]) -> None:
    """Start `stream` and return once a replica has generated tokens of it — read from vLLM itself,
    not from the relayed stream, which may lag far behind on a loaded box — so a pause sent next
    lands in the middle of its generation."""
    before = generated(replicas)
    stream.start()
    wait_for(lambda: generated(replicas) > before, "a replica generates the stream's first tokens")


@pytest.fixture(autouse=True)
def resumed(stack) -> Iterator[None]:
    """However a test ends, the fleet is left running for the next one."""
    yield
    url, _ = stack
    if httpx.get(url + "/is_paused", timeout=300).json()["is_paused"]:
        httpx.post(url + "/resume", timeout=300)


def test_a_keep_pause_carries_a_stream_across_a_real_weight_update(stack, replicas, step_dirs):
    url, runtime = stack
    before = greedy(url)
    assert before["weight_versions"] == [{"version": "default", "start": 0, "end": 8}]
    for attempt in range(4):  # a starved box may let the stream end before the pause lands: then again
        stream = Streaming(url, max_tokens=HELD, rollout_id=f"rl-keep-{attempt}")
        decoding(stream, replicas)
        assert call(url, "POST", "/pause?mode=keep") == {"status": "paused"}
        if stream.is_alive():
            break
        assert call(url, "POST", "/resume") == {"status": "resumed"}
    assert call(url, "GET", "/is_paused") == {"is_paused": True}
    waiting: dict = {}
    held = threading.Thread(target=lambda: waiting.update(greedy(url)), daemon=True)
    held.start()
    wait_for(lambda: runtime.pool.barrier.waiting == 1, "the new generation waits at the barrier")
    assert not waiting and stream.is_alive()  # nothing new reached a replica, the stream is frozen, not cut

    rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(step_dirs[0])}}
    assert call(url, "POST", "/collective_rpc", rpc) == {"results": [None, None]}  # one worker per replica
    assert call(url, "POST", "/update_weight_version", {"new_version": "step-1"}) == \
        {"success": True, "new_version": "step-1"}
    assert call(url, "GET", "/weight_info") == {"weight_version": "step-1"}
    assert not waiting
    assert call(url, "POST", "/resume") == {"status": "resumed"}
    assert call(url, "GET", "/is_paused") == {"is_paused": False}

    held.join(120)
    stream.join(300)
    assert waiting["weight_versions"] == [{"version": "step-1", "start": 0, "end": 8}]
    spans = stream.spans
    assert [s["version"] for s in spans] == ["default", "step-1"]  # vLLM's own spans, through the gateway
    assert spans[0]["start"] == 0 and 0 < spans[0]["end"] == spans[1]["start"] and spans[1]["end"] == HELD
    assert len(stream.token_ids) == HELD

    exported = call(url, "GET", f"/v1/rollouts/{stream.body['rollout_id']}")
    generated = exported["turns"][0]
    assert generated["weight_versions"] == [{"version": s["version"], "start": generated["prompt_end"] + s["start"],
                                             "end": generated["prompt_end"] + s["end"]} for s in spans]
    per_token = exported["weight_versions"]
    assert per_token[:generated["prompt_end"]] == [None] * 20
    assert per_token[generated["prompt_end"]:] == ["default"] * spans[0]["end"] + ["step-1"] * (HELD - spans[0]["end"])


def test_a_reset_clears_the_routers_index_and_the_new_weights_answer_differently(stack, step_dirs):
    url, runtime = stack
    old = greedy(url)  # step-1 weights, now prefix-cached somewhere
    views = runtime.pool.router.views
    assert sum(len(view.sent) for view in views.values()) > 0
    assert call(url, "POST", "/reset_prefix_cache") == {"success": True}
    assert [len(view.sent) for view in views.values()] == [0, 0]

    assert call(url, "POST", "/pause?mode=abort") == {"status": "paused"}
    rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(step_dirs[1])}}
    call(url, "POST", "/collective_rpc", rpc)
    call(url, "POST", "/update_weight_version", {"new_version": "step-2"})
    assert call(url, "POST", "/reset_prefix_cache") == {"success": True}
    call(url, "POST", "/resume")
    new = greedy(url)
    assert new["weight_versions"] == [{"version": "step-2", "start": 0, "end": 8}]
    assert new["token_ids"] != old["token_ids"]  # the same greedy prompt, other weights
    health = httpx.get(url + "/health").json()
    assert [r["weight_version"] for r in health["replicas"]] == ["step-2", "step-2"]


def test_a_trainer_drives_three_steps_with_rollouts_streaming_and_every_token_tagged(stack, replicas, step_dirs):
    """examples/rl/training_loop.py: three steps of pause (keep) → reload_weights → reset → version →
    resume through the gateway, two rollout workers streaming all along, and before each step a
    held rollout that has produced tokens and has many more to go: each spans its update."""
    url, _ = stack
    loop = load_example("rl/training_loop.py")
    summary = loop.train(url, MODEL, [str(d) for d in step_dirs], name="loop-{}")
    assert summary["untagged_tokens"] == 0 and summary["versions_going_backwards"] == 0
    assert set(summary["tokens_by_version"]) == {"step-2", "loop-1", "loop-2", "loop-3"}  # each step on live streams
    # held rollout k started under the version before step k and was frozen mid-way by it (it may
    # still have been streaming at a later step too)
    assert [held[:2] for held in summary["held_across"]] == [["step-2", "loop-1"], ["loop-1", "loop-2"],
                                                             ["loop-2", "loop-3"]]
    assert summary["rollouts_spanning_an_update"] >= 3
    assert call(url, "GET", "/weight_info") == {"weight_version": "loop-3"}
    timing = loop.compare(loop.Target([url]), loop.Target([r.url for r in replicas]), cycles=4)
    assert timing["gateway"]["median_ms"] > 0 and timing["direct"]["median_ms"] > 0
    print(summary, timing)  # shown with -s: the figure docs/benchmarks.md reports comes from the example's CLI


def test_a_generation_cut_by_an_abort_pause_resumes_to_the_uninterrupted_greedy_ids(stack, replicas):
    """A partial rollout on real vLLM: a greedy stream is cut by `pause?mode=abort` after its first
    tokens, the fleet relabelled (same weights) and resumed; the client's one stream holds exactly
    the ids of an uninterrupted greedy run, and both version spans. A stream the pause missed on a
    starved box (one version span over all its ids: nothing was cut) is started again."""
    url, _ = stack
    params = {"temperature": 0.0, "max_tokens": LONG, "ignore_eos": True, "logprobs": 0}
    body = {"model": MODEL, "token_ids": PROMPT[:20], "sampling_params": params}
    whole = call(url, "POST", "/inference/v1/generate", body)["choices"][0]
    assert len(whole["token_ids"]) == LONG

    for attempt in range(4):  # a loaded box may delay the pause past the generation's end: then again
        version = call(url, "GET", "/weight_info")["weight_version"]
        rollout_id = f"rl-partial-{attempt}"
        stream = Streaming(url, max_tokens=LONG, rollout_id=rollout_id)
        stream.body.update(sampling_params=params, partial_rollout=True)
        decoding(stream, replicas)
        assert call(url, "POST", "/pause?mode=abort") == {"status": "paused"}
        call(url, "POST", "/update_weight_version", {"new_version": f"{version}-relabelled"})
        assert call(url, "POST", "/resume") == {"status": "resumed"}
        stream.join(300)

        assert stream.token_ids == whole["token_ids"]  # spliced exactly: the same greedy ids
        assert [c["finish_reason"] for e in stream.events for c in e["choices"] if c.get("finish_reason")] == ["length"]
        spans = stream.spans
        if len(spans) > 1:  # one span: the pause landed before or after the generation, not in it
            break
    assert [s["version"] for s in spans] == [version, f"{version}-relabelled"]
    cut = spans[0]["end"]
    assert spans == [{"version": version, "start": 0, "end": cut},
                     {"version": f"{version}-relabelled", "start": cut, "end": LONG}] and 0 < cut < LONG
    logprobs = [lp for e in stream.events for c in e["choices"] for lp in (c.get("logprobs") or {}).get("content", ())]
    assert [lp["token_id"] for lp in logprobs] == whole["token_ids"]
    assert logprobs[:cut] == whole["logprobs"]["content"][:cut]  # the first leg is the same decode
    exported = call(url, "GET", f"/v1/rollouts/{rollout_id}")
    assert exported["token_ids"] == PROMPT[:20] + whole["token_ids"]
    assert exported["weight_versions"] == [None] * 20 + [version] * cut + [f"{version}-relabelled"] * (LONG - cut)
    print("partial rollout cut after", cut, "tokens, attempt", attempt + 1)
