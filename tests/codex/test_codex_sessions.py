"""Longer real Codex CLI (0.169.0) sessions against the real gateway and a scripted vLLM.

apply_patch as Codex's freeform tool, several tool calls in one turn, reasoning echoed back
(from the session cache and, after a cache miss, from its sealed blob alone), automatic
compaction, and the errors Codex acts on (context_length_exceeded, 429, 503, text-only 400).
The prompts the fake vLLM received are checked id for id: everything the model generated
earlier in the session is in the next prompt exactly as generated. Generated ids are often
spelled one character per token (`spelled`), which no re-encoding of the text reproduces.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator

import httpx
import pytest
from transformers import AutoTokenizer

from gateway.adapters.responses_input import parse_request
from gateway.formats import load_format
from gateway.settings import Settings
from tests.codex.harness import (END_THINK, GENERATE, IM_END, THINK, Traffic, answer_ids, call_ids, catalog,
                                 codex_exec, ids, recording, spelled)
from tests.support import gateway_server
from tests.support.fake_vllm import FakeVLLM, Script

pytestmark = pytest.mark.codex

SECRET = "codex-sessions"


@pytest.fixture(scope="module")
def tokenizer(qwen_tokenizer_dir):
    return AutoTokenizer.from_pretrained(qwen_tokenizer_dir)


@pytest.fixture(scope="module")
def chat_format(qwen_tokenizer_dir):
    return load_format(str(qwen_tokenizer_dir))


def start(qwen_tokenizer_dir, monkeypatch, *, max_model_len: int = 32768, **settings_fields):
    """The gateway (recorded) in front of a fresh fake vLLM: a context manager yielding both."""
    traffic = Traffic()
    create_app = gateway_server.create_app
    monkeypatch.setattr(gateway_server, "create_app", lambda settings: recording(create_app(settings), traffic))

    class Stack:
        def __enter__(self):
            self.fake = FakeVLLM(max_model_len=max_model_len).__enter__()
            settings = Settings(model=str(qwen_tokenizer_dir), upstreams=[self.fake.url], served_model_name="tiny-qwen3",
                                reasoning_secret=SECRET, **settings_fields)
            self.gateway = gateway_server.running_gateway(settings)
            self.url = self.gateway.__enter__()
            self.traffic = traffic
            return self

        def __exit__(self, *exc_info):
            self.gateway.__exit__(*exc_info)
            self.fake.__exit__(*exc_info)

    return Stack()


@pytest.fixture
def stack(qwen_tokenizer_dir, monkeypatch) -> Iterator:
    with start(qwen_tokenizer_dir, monkeypatch) as running:
        yield running


def prompts(fake: FakeVLLM) -> list[list[int]]:
    """The prompts of the model calls, without the gateway's start-up probe."""
    return [body["token_ids"] for body in fake.bodies(GENERATE)[1:]]


def continues(later: list[int], earlier: list[int], generated: list[int]) -> bool:
    return later[:len(earlier) + len(generated)] == earlier + generated


PATCH = "*** Begin Patch\n*** Add File: notes.txt\n+first line\n+second line\n*** End Patch"
EDIT = "*** Begin Patch\n*** Update File: notes.txt\n@@\n first line\n-second line\n+second line, edited\n*** End Patch"


def test_apply_patch_is_a_freeform_tool_codex_applies(stack, codex_bin, tokenizer, tmp_path):
    """With a catalog entry saying so, Codex offers apply_patch as a custom (freeform) tool; the
    gateway offers it to the model as a function of one string and hands the call back as a
    custom_tool_call, which Codex applies. Two patches (create, then edit), then the answer."""
    add = call_ids(tokenizer, "apply_patch", {"input": PATCH}, spell="first line")
    edit = call_ids(tokenizer, "apply_patch", {"input": EDIT}, spell="edited")
    answer = answer_ids(tokenizer, "Patched notes.txt.")
    stack.fake.queue(Script(add), Script(edit), Script(answer))
    config = f'model_catalog_json = "{catalog(tmp_path / "models.json")}"'
    run, work = codex_exec(codex_bin, stack.url, tmp_path, "Create notes.txt", config=config)

    assert run.returncode == 0, run.stderr
    assert (work / "notes.txt").read_text() == "first line\nsecond line, edited\n"
    assert [m["text"] for m in run.items("agent_message")] == ["Patched notes.txt."]
    changes = run.items("file_change")
    assert [c["status"] for c in changes] == ["completed", "completed"]
    assert [[(ch["path"].rsplit("/", 1)[-1], ch["kind"]) for ch in c["changes"]] for c in changes] == [
        [("notes.txt", "add")], [("notes.txt", "update")]]

    first, second, third = (post.body for post in stack.traffic.posts)
    [tool] = [t for t in first["tools"] if t.get("name") == "apply_patch"]
    assert tool["type"] == "custom" and tool["format"]["type"] == "grammar"
    # Codex echoes the call as a custom_tool_call with the patch, and answers it with its output.
    call, output = second["input"][-2:]
    assert (call["type"], call["name"], call["input"]) == ("custom_tool_call", "apply_patch", PATCH)
    assert output["type"] == "custom_tool_call_output" and output["call_id"] == call["call_id"]
    assert "Success" in output["output"] and "notes.txt" in output["output"]

    p1, p2, p3 = prompts(stack.fake)
    assert continues(p2, p1, add) and continues(p3, p2, edit)
    tail = tokenizer.decode(p2[len(p1) + len(add):])
    assert tail == (f"\n<|im_start|>user\n<tool_response>\n{output['output']}\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\n")


@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_every_prompt_of_a_session_holds_all_generated_ids(stack, codex_bin, tokenizer, tmp_path, websockets):
    """Two tool calls, then the answer: the third prompt holds both earlier generations exactly."""
    one = call_ids(tokenizer, "exec_command", {"cmd": "echo one > a.txt"}, spell="echo one")
    two = call_ids(tokenizer, "exec_command", {"cmd": "echo two >> a.txt"}, spell="echo two")
    answer = answer_ids(tokenizer, "Wrote a.txt.")
    assert spelled(tokenizer, "echo one") != ids(tokenizer, "echo one")
    stack.fake.queue(Script(one), Script(two), Script(answer))
    run, work = codex_exec(codex_bin, stack.url, tmp_path, "Write a.txt", websockets=websockets)

    assert run.returncode == 0, run.stderr
    assert (work / "a.txt").read_text() == "one\ntwo\n"
    assert [c["exit_code"] for c in run.items("command_execution")] == [0, 0]
    assert [m["text"] for m in run.items("agent_message")] == ["Wrote a.txt."]
    p1, p2, p3 = prompts(stack.fake)
    assert continues(p2, p1, one) and continues(p3, p2, two)
    assert continues(p3, p1, one)  # the first generation, still exact two turns later
    transports = [kind for kind, path in stack.traffic.connections if path == "/v1/responses"]
    assert transports == (["websocket"] if websockets else ["http"] * 3)
