"""The real Codex CLI (0.171.0) against the real gateway, over HTTP and WebSocket mode.

A scripted vLLM makes the model's output deterministic, so the tests can assert what Codex
did with it (ran the command, printed the answer) and the exact prompt ids the gateway sent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.core.settings import Settings
from gateway.ops.vllm_process import VLLMProcess
from tests.codex.harness import GENERATE, Run, Traffic, codex_exec, record, recorded_gateway
from tests.support import gateway_server
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, IM_START, TOOL_CALL, ids

pytestmark = pytest.mark.codex


@pytest.fixture
def stack(qwen_tokenizer_dir, monkeypatch) -> Iterator[tuple[FakeVLLM, str, Traffic]]:
    with recorded_gateway(monkeypatch, qwen_tokenizer_dir, served_model_name="tiny-qwen3") as r:
        yield r.fake, r.url, r.traffic


def tool_call(tokenizer, arguments: dict) -> list[int]:
    call = json.dumps({"name": "exec_command", "arguments": arguments})
    return [TOOL_CALL, *ids(tokenizer, f"\n{call}\n"), END_TOOL_CALL, IM_END]


def test_plain_answer(stack, codex_bin, tokenizer, tmp_path):
    fake, url, traffic = stack
    fake.queue(Script(ids(tokenizer, "Hello from the gateway.") + [IM_END], stop_reason=IM_END))
    run, _ = codex_exec(codex_bin, url, tmp_path, "Say hello")
    assert run.returncode == 0, run.stderr
    assert [m["text"] for m in run.items("agent_message")] == ["Hello from the gateway."]
    assert run.events[-1]["type"] == "turn.completed"
    [response] = traffic.responses()
    assert [(item["type"], item["content"][0]["text"]) for item in response["output"]] == [
        ("message", "Hello from the gateway.")]
    # Codex's prompt is the last user message, right before the assistant's turn.
    end = [IM_START, *ids(tokenizer, "user\nSay hello"), IM_END, *ids(tokenizer, "\n"), IM_START,
           *ids(tokenizer, "assistant\n")]
    assert fake.bodies(GENERATE)[-1]["token_ids"][-len(end):] == end


def assert_tool_turn(fake: FakeVLLM, traffic: Traffic, run: Run, work: Path, call: list[int]) -> None:
    """Codex ran the scripted command, posted its output, and got the final answer on exact tokens."""
    assert run.returncode == 0, run.stderr
    assert (work / "out.txt").read_text() == "hi\n"
    [command] = run.items("command_execution")
    assert "echo hi > out.txt" in command["command"] and command["exit_code"] == 0
    assert [m["text"] for m in run.items("agent_message")] == ["All done."]
    # The two model calls of the turn.
    first, second = fake.bodies(GENERATE)
    assert second["token_ids"][:len(first["token_ids"]) + len(call)] == first["token_ids"] + call
    # Each response carries only its own new items: nothing of Codex's history is echoed back.
    call_response, answer_response = [r for r in traffic.responses() if r["output"]]
    assert [item["type"] for item in call_response["output"]] == ["function_call"]
    assert json.loads(call_response["output"][0]["arguments"]) == {"cmd": "echo hi > out.txt"}
    assert [item["type"] for item in answer_response["output"]] == ["message"]
    assert answer_response["output"][0]["content"][0]["text"] == "All done."


def test_shell_tool_call_over_http(stack, codex_bin, tokenizer, tmp_path):
    fake, url, traffic = stack
    call = tool_call(tokenizer, {"cmd": "echo hi > out.txt"})
    fake.queue(Script(call, stop_reason=IM_END), Script(ids(tokenizer, "All done.") + [IM_END], stop_reason=IM_END))
    run, work = codex_exec(codex_bin, url, tmp_path, "Write hi to out.txt")
    assert_tool_turn(fake, traffic, run, work, call)
    assert [kind for kind, path in traffic.connections if path == "/v1/responses"] == ["http", "http"]
    # The second prompt is the first, the generated ids, then the tool output: the output is there.
    first, second = fake.bodies(GENERATE)
    tail = tokenizer.decode(second["token_ids"][len(first["token_ids"]) + len(call):])
    assert tail.startswith("\n<|im_start|>user\n<tool_response>\n") and "Process exited with code 0" in tail
    assert tail.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_shell_tool_call_over_websocket(stack, codex_bin, tokenizer, tmp_path):
    fake, url, traffic = stack
    call = tool_call(tokenizer, {"cmd": "echo hi > out.txt"})
    fake.queue(Script(call, stop_reason=IM_END), Script(ids(tokenizer, "All done.") + [IM_END], stop_reason=IM_END))
    run, work = codex_exec(codex_bin, url, tmp_path, "Write hi to out.txt", websockets=True)
    assert_tool_turn(fake, traffic, run, work, call)
    # Codex kept to the socket: no HTTP POST of the turn, one connection for the whole turn.
    assert [kind for kind, path in traffic.connections if path == "/v1/responses"] == ["websocket"]
    created = [e["response"]["id"] for e in traffic.events if e["type"] == "response.created"]
    assert len(created) == 3  # the generate:false warmup, the tool call, the answer
    # The turn's state: given with the warmup, replayed by Codex in the turn's later frames
    # (client_metadata), echoed back unchanged.
    states = [e["headers"]["x-codex-turn-state"] for e in traffic.events if e["type"] == "response.metadata"]
    assert len(states) == 3 and len(set(states)) == 1
    assert [f.get("client_metadata", {}).get("x-codex-turn-state") for f in traffic.frames] == [None, *states[:2]]


SHORT_CONTEXT = 12288


@pytest.fixture(scope="module")
def short_vllm_qwen(qwen_model_dir, tmp_path_factory) -> Iterator[VLLMProcess]:
    """Stock vLLM serving the tiny Qwen3 with a 12k context. Codex sends no max_output_tokens,
    so the gateway allows all the room left after Codex's ~6-9k-token prompt, and random
    weights rarely stop: at ~50 tokens/s on one core the shared `vllm_qwen`'s 32k context
    means ~8 minutes of noise per request; 12k bounds it to about a minute."""
    cpu = min(os.sched_getaffinity(0))
    with VLLMProcess(qwen_model_dir, served_model_name="tiny-qwen3", max_model_len=SHORT_CONTEXT,
                     enforce_eager=True, cpus=str(cpu),
                     log_path=tmp_path_factory.mktemp("vllm-codex") / "vllm.log") as process:
        yield process


def test_smoke_against_real_vllm(short_vllm_qwen, qwen_model_dir, codex_bin, tmp_path, monkeypatch):
    """Random weights: the output is noise, but the turn must end cleanly, not hang, and
    agree with what the gateway sent Codex."""
    traffic = record(monkeypatch)
    settings = Settings(model=str(qwen_model_dir), upstreams=[short_vllm_qwen.url], served_model_name="tiny-qwen3")
    with gateway_server.running_gateway(settings) as url:
        run, _ = codex_exec(codex_bin, url, tmp_path, "Say hello", timeout=480)
    finals = traffic.responses()
    assert finals, run.stderr
    for response in finals:
        usage = response["usage"]
        assert usage["output_tokens"] > 0
        if response["status"] == "incomplete":  # noise until the context was full
            assert response["incomplete_details"] == {"reason": "model_context_window_exceeded"}
            assert usage["input_tokens"] + usage["output_tokens"] == SHORT_CONTEXT
        else:
            assert response["status"] == "completed"
    # Codex fails the turn on an incomplete response and completes it otherwise.
    ended = "turn.failed" if finals[-1]["status"] == "incomplete" else "turn.completed"
    assert run.events[-1]["type"] == ended
    assert run.returncode == (1 if ended == "turn.failed" else 0)
