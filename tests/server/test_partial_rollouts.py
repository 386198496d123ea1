"""Partial rollouts against a scripted replica (tests/support/control_replica.py): a generate call
cut by the fleet's abort pause at a known token goes on after `/resume` from its prompt plus its
tokens so far, and the client reads one answer — ids, logprobs, usage and the weight-version spans
of both legs; what cannot be resumed exactly is refused (asked for) or left to vLLM's abort
(defaulted to by --partial-rollouts); a trainer's own /abort_requests is never resumed.

The real-vLLM half (greedy ids equal to an uninterrupted run) is tests/real_vllm/test_rl_control.py.
"""

from __future__ import annotations

import base64
import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import numpy as np
import orjson
import pytest

from gateway.core.settings import Settings
from gateway.pipeline.runtime import Runtime
from gateway.server.app import build_runtime
from tests.support.control_replica import ControlReplica
from tests.support.fake_vllm import Script
from tests.support.gateway_server import running_gateway
from tests.support.waiting import wait_for

MODEL = "tiny-qwen3"
PROMPT = [1, 2, 3]
IM_END = 151645


@dataclass
class Stack:
    url: str
    runtime: Runtime
    replica: ControlReplica

    def post(self, path: str, body: dict | None = None) -> httpx.Response:
        return httpx.post(self.url + path, json=body, timeout=60)


@contextmanager
def stack(model_dir, **settings) -> Iterator[Stack]:
    with ControlReplica() as replica:
        config = Settings(model=str(model_dir), upstreams=[replica.url], health_interval=0.2, server_dev_mode=True,
                          **settings)
        runtime = build_runtime(config)
        with running_gateway(config, runtime) as url:
            yield Stack(url, runtime, replica)


@pytest.fixture
def gateway(qwen_tokenizer_dir) -> Iterator[Stack]:
    with stack(qwen_tokenizer_dir) as running:
        yield running


def generate_body(*, stream: bool, **extra) -> dict:
    params = {"temperature": 0.0, "max_tokens": 10, "min_tokens": 4, "logprobs": 0, **extra.pop("params", {})}
    body = {"model": MODEL, "token_ids": PROMPT, "sampling_params": params, "stream": stream, **extra}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


class Client(threading.Thread):
    """One generate call on its own thread: the streamed events (or the body) as they come."""

    def __init__(self, url: str, body: dict) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.events: list[dict] = []
        self.answer: dict | None = None
        self.status: int | None = None

    def run(self) -> None:
        if not self.body["stream"]:
            response = httpx.post(self.url + "/inference/v1/generate", json=self.body, timeout=60)
            self.status, self.answer = response.status_code, response.json()
            return
        with httpx.stream("POST", self.url + "/inference/v1/generate", json=self.body, timeout=60) as response:
            self.status = response.status_code
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    self.events.append(orjson.loads(line[6:]))

    @property
    def token_ids(self) -> list[int]:
        return [t for e in self.events for c in e["choices"] for t in c.get("token_ids") or ()]

    @property
    def finish_reasons(self) -> list[str]:
        return [c["finish_reason"] for e in self.events for c in e["choices"] if c.get("finish_reason")]


def cut_by_an_abort_pause(gateway: Stack, body: dict, *, then_version: str | None = "step-1",
                          before_release=None, experts: tuple[str | None, str | None] = (None, None)) -> Client:
    """Send `body`; once the replica has produced 11 and 12 (streamed; non-streamed: once it holds
    the request), pause the fleet with mode=abort, and let the replica end that leg with 13 and
    finish_reason "abort", as vLLM does; then label new weights and resume. `experts`: each leg's
    `routed_experts`."""
    released = threading.Event()
    cut = Script([11, 12, 13], finish_reason="abort", logprobs=[-0.1, -0.2, -0.3], routed_experts=experts[0])
    if body["stream"]:
        cut.stall_after, cut.stall_until = 2, released
    else:
        cut.headers_until = released
    gateway.replica.queue(cut, Script([14, 15, IM_END], logprobs=[-0.4, -0.5, -0.6], routed_experts=experts[1]))
    client = Client(gateway.url, body)
    client.start()
    if body["stream"]:
        wait_for(lambda: len(client.token_ids) == 2, "the first two tokens reached the client")
    else:
        wait_for(lambda: len(gateway.replica.bodies("/inference/v1/generate")) == 1, "the replica holds the call")
    assert gateway.post("/pause?mode=abort").json() == {"status": "paused"}
    if before_release is not None:
        before_release()
    released.set()
    if then_version is not None:
        wait_for(lambda: gateway.runtime.pool.barrier.waiting == 1 or not client.is_alive(),
                 "the resumed leg waits at the barrier (or the call ended)")
        assert len(gateway.replica.bodies("/inference/v1/generate")) == 1  # nothing sent while paused
        gateway.post("/update_weight_version", {"new_version": then_version})
    assert gateway.post("/resume").json() == {"status": "resumed"}
    client.join(60)
    return client


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_generation_cut_by_an_abort_pause_goes_on_after_the_resume_as_one_answer(gateway, stream):
    client = cut_by_an_abort_pause(gateway, generate_body(stream=stream, partial_rollout=True))
    assert client.status == 200

    first, resumed = gateway.replica.bodies("/inference/v1/generate")
    assert "partial_rollout" not in first and first["token_ids"] == PROMPT
    assert resumed["token_ids"] == PROMPT + [11, 12, 13]  # the prompt plus what the cut leg had
    assert resumed["request_id"] == first["request_id"]  # still the gateway's one request
    assert resumed["sampling_params"] == {**first["sampling_params"], "max_tokens": 7, "min_tokens": 1}

    spans = [{"version": "default", "start": 0, "end": 3}, {"version": "step-1", "start": 3, "end": 6}]
    usage = {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}
    if stream:
        assert client.token_ids == [11, 12, 13, 14, 15, IM_END]
        assert client.finish_reasons == ["stop"]  # the cut leg's "abort" never reaches the client
        assert [c["weight_versions"] for e in client.events for c in e["choices"] if c.get("weight_versions")] == \
            [spans]
        assert [e["usage"] for e in client.events if e.get("usage")] == [usage]  # one usage, over the whole
        logprobs = [lp["logprob"] for e in client.events for c in e["choices"] for lp in c["logprobs"]["content"]]
    else:
        choice = client.answer["choices"][0]
        assert choice["token_ids"] == [11, 12, 13, 14, 15, IM_END]
        assert choice["finish_reason"] == "stop" and choice["weight_versions"] == spans
        assert {k: client.answer["usage"][k] for k in usage} == usage
        assert [lp["token_id"] for lp in choice["logprobs"]["content"]] == choice["token_ids"]
        logprobs = [lp["logprob"] for lp in choice["logprobs"]["content"]]
    assert logprobs == [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6]


def npy(rows: np.ndarray) -> str:
    """As vLLM answers `routed_experts` (vllm/utils/serial_utils.py `numpy2base64`)."""
    with io.BytesIO() as buffer:
        np.save(buffer, rows, allow_pickle=False)
        return base64.b64encode(buffer.getvalue()).decode()


def rows_of(encoded: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(encoded)), allow_pickle=False)


@pytest.mark.parametrize("start", [0, 2])
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_the_routed_experts_of_every_leg_come_back_in_order(gateway, stream, start):
    """vLLM's `routed_experts`: the MoE routing (layers × top-k) of every position it forwarded, from
    `routed_experts_prompt_start` on, on the last choice. The cut leg forwarded the prompt's 3 and
    11, 12 (13 was sampled, never forwarded); the resumed leg asks for its rows from there (its
    prefill of 13 is what made 14), and the client gets both legs' rows in order: prompt + output -
    1 - start rows, as one uninterrupted generation answers."""
    cut_rows = np.arange((5 - start) * 4, dtype=np.uint8).reshape(5 - start, 2, 2)  # positions start..4
    resumed_rows = 100 + np.arange(3 * 4, dtype=np.uint8).reshape(3, 2, 2)  # positions 5..7
    body = generate_body(stream=stream, partial_rollout=True, params={"routed_experts_prompt_start": start} if start
                         else {})
    client = cut_by_an_abort_pause(gateway, body, experts=(npy(cut_rows), npy(resumed_rows)))
    assert client.status == 200
    first, resumed = gateway.replica.bodies("/inference/v1/generate")
    assert first["sampling_params"].get("routed_experts_prompt_start", 0) == start
    assert resumed["sampling_params"]["routed_experts_prompt_start"] == 5
    choices = [c for e in client.events for c in e["choices"]] if stream else client.answer["choices"]
    experts = [c["routed_experts"] for c in choices if c.get("routed_experts") is not None]
    assert len(experts) == 1  # on the last choice only, as vLLM sends it
    rows = rows_of(experts[0])
    assert rows.shape == (len(PROMPT) + 6 - 1 - start, 2, 2) and rows.dtype == np.uint8
    assert rows.tolist() == cut_rows.tolist() + resumed_rows.tolist()


def test_the_rollout_records_both_legs_with_their_versions(gateway):
    client = cut_by_an_abort_pause(gateway, generate_body(stream=True, partial_rollout=True, rollout_id="pr-1"))
    assert client.status == 200
    exported = httpx.get(gateway.url + "/v1/rollouts/pr-1").json()
    assert exported["token_ids"] == PROMPT + [11, 12, 13, 14, 15, IM_END]
    assert exported["weight_versions"] == [None] * 3 + ["default"] * 3 + ["step-1"] * 3
    assert exported["logprobs"][3:] == [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6]
    assert exported["turns"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(("params", "field"), [
    ({"stop": ["</answer>"]}, "sampling_params.stop"),
    ({"n": 2}, "sampling_params.n"),
    ({"structured_outputs": {"json": {"type": "object"}}}, "sampling_params.structured_outputs"),
    ({"presence_penalty": 0.5}, "sampling_params.presence_penalty"),
    ({"prompt_logprobs": 1}, "sampling_params.prompt_logprobs"),
])
def test_what_cannot_be_resumed_exactly_is_refused_when_asked_for(gateway, params, field):
    answer = gateway.post("/inference/v1/generate", generate_body(stream=False, partial_rollout=True, params=params))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "partial_rollout_unsupported" and error["param"] == field
    assert "cannot be resumed exactly" in error["message"]
    assert gateway.replica.bodies("/inference/v1/generate") == []  # refused before any replica saw it


def test_text_output_and_completions_are_refused_when_asked_for(gateway):
    text = gateway.post("/inference/v1/generate", generate_body(stream=False, partial_rollout=True,
                                                                output_mode="text"))
    assert text.status_code == 400 and text.json()["error"]["param"] == "output_mode"
    completions = gateway.post("/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": 3,
                                                   "partial_rollout": True})
    assert completions.status_code == 400
    assert completions.json()["error"]["code"] == "partial_rollout_unsupported"
    assert "/inference/v1/generate only" in completions.json()["error"]["message"]
    assert gateway.replica.requests == []


def test_under_the_flag_what_cannot_be_resumed_keeps_vllms_abort(qwen_tokenizer_dir):
    with stack(qwen_tokenizer_dir, partial_rollouts=True) as flagged:
        client = cut_by_an_abort_pause(flagged, generate_body(stream=True, params={"stop": ["</answer>"]}),
                                       then_version=None)
        assert client.token_ids == [11, 12, 13] and client.finish_reasons == ["abort"]  # as vLLM answered
        assert len(flagged.replica.bodies("/inference/v1/generate")) == 1
        flagged.replica.reset()

        opted_out = cut_by_an_abort_pause(flagged, generate_body(stream=False, partial_rollout=False),
                                          then_version=None)
        assert opted_out.answer["choices"][0]["finish_reason"] == "abort"
        flagged.replica.reset()

        defaulted = cut_by_an_abort_pause(flagged, generate_body(stream=True), then_version="step-2")
        assert defaulted.token_ids == [11, 12, 13, 14, 15, IM_END] and defaulted.finish_reasons == ["stop"]


def test_a_trainers_own_abort_is_not_resumed(gateway):
    def abort_it() -> None:
        assert gateway.post("/abort_requests", {"request_ids": []}).status_code == 200

    client = cut_by_an_abort_pause(gateway, generate_body(stream=True, partial_rollout=True), then_version=None,
                                   before_release=abort_it)
    assert client.token_ids == [11, 12, 13] and client.finish_reasons == ["abort"]
    assert len(gateway.replica.bodies("/inference/v1/generate")) == 1


def test_an_abort_without_a_pause_is_not_resumed(gateway):
    gateway.replica.queue(Script([11, 12], finish_reason="abort"))
    answer = gateway.post("/inference/v1/generate", generate_body(stream=False, partial_rollout=True))
    assert answer.json()["choices"][0]["finish_reason"] == "abort"
    assert len(gateway.replica.bodies("/inference/v1/generate")) == 1
