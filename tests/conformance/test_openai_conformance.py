"""Everything the gateway emits is what OpenAI's published OpenAPI description says.

Representative turns (text, reasoning + text, one call, parallel calls, a length cut, an
upstream failure) go through the real gateway in front of a scripted vLLM; every Responses
stream event, every final Response object (SSE and JSON), every Chat Completions object
and chunk is validated with `jsonschema` against the pinned schemas. The event order is
OpenAI's too: each output item is done before the next one is added.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.codex.harness import answer_ids, call_ids
from tests.conformance.openai_schema import errors, event_errors
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_THINK, THINK, ids

TOOLS = [{"type": "function", "name": "exec_command", "description": "Run a shell command",
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in TOOLS[0].items() if k != "type"}}]


pytestmark = pytest.mark.stack(served_model_name="m", fake={"max_model_len": 4096})


def _thinking(tokenizer, text: str) -> list[int]:
    return [THINK, *ids(tokenizer, f"\n{text}\n"), END_THINK, *ids(tokenizer, "\n\n")]


def _scenarios(tokenizer) -> dict[str, Script]:
    call = call_ids(tokenizer, "exec_command", {"cmd": "ls"})
    second = call_ids(tokenizer, "exec_command", {"cmd": "pwd"})
    return {
        "text": Script(answer_ids(tokenizer, "Hello there")),
        "reasoning_text": Script(_thinking(tokenizer, "Say hi.") + answer_ids(tokenizer, "Hi!")),
        "one_call": Script(_thinking(tokenizer, "List.") + call),
        "parallel_calls": Script(call[:-1] + ids(tokenizer, "\n") + second),
        "length": Script(_thinking(tokenizer, "Long") + ids(tokenizer, "and on and on"), finish_reason="length"),
        "failure": Script(_thinking(tokenizer, "Oops") + ids(tokenizer, "partial"), error_after=3),
    }


SCENARIOS = ["text", "reasoning_text", "one_call", "parallel_calls", "length", "failure"]


def _sse(response: httpx.Response) -> list[dict]:
    return [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:") and
            line[5:].strip() != "[DONE]"]


def _check_order(events: list[dict], *, failed: bool) -> None:
    """Each item closes before the next opens; indices and sequence numbers in order (a
    failure may leave the item it interrupted open)."""
    open_index = None
    for n, event in enumerate(events):
        assert event["sequence_number"] == n
        if event["type"] == "response.output_item.added":
            assert open_index is None, f"item {event['output_index']} added while {open_index} is open"
            open_index = event["output_index"]
        elif event["type"] == "response.output_item.done":
            assert event["output_index"] == open_index
            open_index = None
    assert open_index is None or failed


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_responses_stream_events_and_objects_conform(stack, tokenizer, scenario):
    stack.reset()
    stack.fake.queue(_scenarios(tokenizer)[scenario])
    body = {"model": "m", "input": "go", "tools": TOOLS, "stream": True}
    with httpx.stream("POST", stack.url + "/v1/responses", json=body, timeout=30) as response:
        assert response.status_code == 200
        events = _sse(response)
    problems = [problem for event in events for problem in event_errors(event)]
    final = events[-1]
    problems += errors("Response", final["response"])
    assert not problems, "\n".join(problems)
    _check_order(events, failed=scenario == "failure")
    expected = {"length": "response.incomplete", "failure": "response.failed"}.get(scenario, "response.completed")
    assert final["type"] == expected
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    output = final["response"]["output"]
    assert done == (output[:len(done)] if scenario == "failure" else output)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_responses_json_objects_conform(stack, tokenizer, scenario):
    stack.reset()
    stack.fake.queue(_scenarios(tokenizer)[scenario])
    response = httpx.post(stack.url + "/v1/responses", json={"model": "m", "input": "go", "tools": TOOLS},
                          timeout=30)
    if scenario == "failure":  # a JSON response that failed is an HTTP error
        assert response.status_code == 502 and errors("ErrorResponse", response.json()) == []
        return
    assert response.status_code == 200, response.text
    problems = errors("Response", response.json())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "failure"])
def test_chat_objects_and_chunks_conform(stack, tokenizer, scenario):
    stack.reset()
    script = _scenarios(tokenizer)[scenario]
    stack.fake.queue(script, script)
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": CHAT_TOOLS, "logprobs": True}
    response = httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text
    problems = errors("CreateChatCompletionResponse", response.json())
    assert not problems, "\n".join(problems)
    stream = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", stack.url + "/v1/chat/completions", json=stream, timeout=30) as response:
        chunks = _sse(response)
    problems = [p for chunk in chunks for p in errors("CreateChatCompletionStreamResponse", chunk)]
    assert not problems, "\n".join(problems)


def test_openai_error_bodies_conform(stack):
    response = httpx.post(stack.url + "/v1/responses", json={"model": "nope", "input": "x"}, timeout=30)
    assert response.status_code == 404
    assert errors("ErrorResponse", response.json()) == []
