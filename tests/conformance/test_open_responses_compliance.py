"""The Open Responses compliance suite, ported: every check of its `src/lib/compliance-tests.ts`
(spec version 2026-04-24) against the real gateway in front of a scripted vLLM.

The suite's request templates go over HTTP (JSON), SSE and WebSocket (`response.create`
frames), each with and without a reasoning block in the model's output; its WebSocket
session tests and compaction tests run as the suite runs them. Every response object and
every event is validated twice over, as the suite does with its schemas generated from the
spec: under `--responses-spec open-responses` against the spec's openapi.json
(tests/conformance/open_responses_schema.py), and under the default against OpenAI's
description (tests/conformance/openai_schema.py), which differs only in the reasoning
events' names.

One deliberate difference: the suite's `image-input` expects a completed response; a
text-only model answers it with a 400 `unsupported_content`, which is asserted instead.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from tests.codex.harness import answer_ids, call_ids
from tests.conformance import open_responses_schema, openai_schema
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_THINK, THINK, ids
from tests.support.sse import sse_events
from tests.support.stack import Stack, fake_stack

MODEL = "m"
SPECS = ["open-responses", "openai"]
TERMINAL = ("response.completed", "response.failed", "response.incomplete")
WEATHER_TOOL = {
    "type": "function", "name": "get_weather", "description": "Get the current weather for a location",
    "parameters": {"type": "object", "properties": {"location": {
        "type": "string", "description": "The city and state, e.g. San Francisco, CA"}}, "required": ["location"]},
}
# A red heart icon on a white background (the suite's image).
IMAGE = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAACAAAAAgCAIAAAD8GO2jAAABmklEQVR42tyWAaTyUBzFew/eG4AHz+MBSAHK"
         "BiJRGFKwIgQQJKLUIioBIhCAiCAAEizAQIAECaASqFFJq84nudjnaqvuPnxzgP9xfrq5938csPn7PwHTKSoViCIEAYEAMhmoKsU2mUCWEQqB5xEM"
         "Ip/HaGQG2G6RSuH9HQ7H34rFrtPbdz4jl6PbwmEsl3QA1mt4vcRKk8dz9eg6IpF7tt9fzGY0gCgafFRFo5Blc5vLhf3eCOj1yNhM5GRMVK0aATxP"
         "Zoz09YXjkQDmczJgquGQAPp9WwCNBgG027YACgUC6HRsAZRKBDAY2AJoNv/ZnwzA6WScznG3p4UAymXGAEkyXrTFAh8fLAGqagQAyGaZpYsi7bHT"
         "NPz8MEj//LxuFPo+UBS8vb0KaLXubrRa7aX0RMLCykwmn0z3+XA4WACcTpCkh9MFAZpmuVXo+mO/w+/HZvNgbblcUCxaSo/Hyck80Yu6XXDcvfVZ"
         "r79cvMZjuN2U9O9vKAqjZrfbIZ0mV4TUi9Xqz6jddNy//7+e3n8Fhf/Llo2kxi8AQyGRoDkmAhAAAAAASUVORK5CYII=")


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


@dataclass(frozen=True)
class Template:
    """One of the suite's request templates: its body, what the model is scripted to answer
    (`tool`: a call of get_weather), and its semantic checks."""

    id: str
    body: dict[str, Any]
    tool: bool = False
    checks: tuple[str, ...] = ("has_output", "completed")
    rejected: str | None = None  # the error code the gateway answers with instead


TEMPLATES = [
    Template("basic-response", {"input": [_user("Say hello in exactly 3 words.")]}),
    Template("assistant-phase", {"input": [
        {"type": "message", "role": "assistant", "phase": "commentary", "content": "I should answer with the saved number."},
        {"type": "message", "role": "assistant", "phase": "final_answer", "content": "The number is four."},
        _user("Repeat only the number.")]}),
    Template("streaming-response", {"input": [_user("Count from 1 to 5.")]}),
    Template("websocket-response", {"input": [_user("Count from 1 to 3.")]}),
    Template("system-prompt", {"input": [
        {"type": "message", "role": "system", "content": "You are a pirate. Always respond in pirate speak."},
        _user("Say hello.")]}),
    Template("tool-calling", {"input": [_user("What's the weather like in San Francisco?")], "tools": [WEATHER_TOOL]},
             tool=True, checks=("has_output", "function_call")),
    Template("tool-calling-streaming", {"input": [_user("What's the weather like in San Francisco?")],
                                        "tools": [WEATHER_TOOL]}, tool=True,
             checks=("has_output", "function_call", "function_call_events")),
    Template("image-input", {"input": [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "What do you see in this image? Answer in one sentence."},
        {"type": "input_image", "image_url": IMAGE}]}]}, rejected="unsupported_content"),
    Template("multi-turn", {"input": [
        _user("My name is Alice."),
        {"type": "message", "role": "assistant", "content": "Hello Alice! Nice to meet you. How can I help you today?"},
        _user("What is my name?")]}),
]


@pytest.fixture(scope="module")
def stacks(qwen_tokenizer_dir) -> Iterator[dict[str, Stack]]:
    with fake_stack(qwen_tokenizer_dir, served_model_name=MODEL, responses_spec="open-responses") as open_spec, \
            fake_stack(qwen_tokenizer_dir, served_model_name=MODEL) as default:
        yield {"open-responses": open_spec, "openai": default}


# -- the model's scripted answers --------------------------------------------------------

def _thinking(tokenizer, text: str) -> list[int]:
    return [THINK, *ids(tokenizer, f"\n{text}\n"), END_THINK, *ids(tokenizer, "\n\n")]


def _answer(tokenizer, *, reasoning: bool, tool: bool = False, text: str = "Hello there, friend.") -> Script:
    head = _thinking(tokenizer, "The user asks something simple.") if reasoning else []
    tail = call_ids(tokenizer, "get_weather", {"location": "San Francisco, CA"}) if tool else answer_ids(tokenizer, text)
    return Script(head + tail)


# -- validation, per spec ------------------------------------------------------------------

def _response_errors(spec: str, response: Any) -> list[str]:
    if spec == "open-responses":
        return open_responses_schema.errors("ResponseResource", response)
    return openai_schema.errors("Response", response)


def _event_errors(spec: str, event: dict[str, Any], *, websocket: bool) -> list[str]:
    if spec == "open-responses":
        return open_responses_schema.event_errors(event, websocket=websocket)
    if event.get("type") == "error" and websocket:  # OpenAI describes no WebSocket envelope: check its parts
        error = event.get("error") or {}
        ok = isinstance(event.get("status"), int) and isinstance(error.get("code"), str) and \
            isinstance(error.get("message"), str)
        return [] if ok else [f"WebSocket error event without status or string code: {event}"]
    return openai_schema.event_errors(event)


def _compact_errors(spec: str, compacted: Any) -> list[str]:
    if spec == "open-responses":
        return open_responses_schema.errors("CompactResource", compacted)
    return openai_schema.errors("CompactResource", compacted)


def _semantic(template: Template, response: dict[str, Any], events: list[dict[str, Any]] | None) -> list[str]:
    """The suite's validators: hasOutput, completedStatus, hasOutputType, the function-call events."""
    problems = []
    types = [item["type"] for item in response.get("output") or []]
    if "has_output" in template.checks and not types:
        problems.append("Response has no output items")
    if "completed" in template.checks and response.get("status") != "completed":
        problems.append(f"Expected status completed but got {response.get('status')}")
    if "function_call" in template.checks and "function_call" not in types:
        problems.append("Expected output item of type function_call but none found")
    if "function_call_events" in template.checks and events is not None:
        seen = [event["type"] for event in events]
        if not any(e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call" for e in events):
            problems.append("Missing response.output_item.added event with function_call item")
        for kind in ("response.function_call_arguments.delta", "response.function_call_arguments.done"):
            if kind not in seen:
                problems.append(f"Missing {kind} event")
        if not any(e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call" for e in events):
            problems.append("Missing response.output_item.done event with function_call item")
    return problems


# -- transports ----------------------------------------------------------------------------

@dataclass
class Turn:
    """One WebSocket turn as the suite's makeWebSocketSession records it."""

    events: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def error_code(self) -> str | None:
        if self.error is not None:
            return self.error["error"].get("code")
        return ((self.final or {}).get("error") or {}).get("code")

    @property
    def failed(self) -> bool:
        return self.error is not None or self.error_code is not None or (self.final or {}).get("status") == "failed"


def _ws_url(stack: Stack) -> str:
    return stack.url.replace("http://", "ws://") + "/v1/responses"


def _ws_turn(socket: ClientConnection, body: dict[str, Any]) -> Turn:
    socket.send(json.dumps(body))
    turn = Turn()
    while True:
        event = json.loads(socket.recv(timeout=30))
        turn.events.append(event)
        if event.get("type") in TERMINAL:
            turn.final = event["response"]
            return turn
        if event.get("type") == "error":
            turn.error = event
            return turn


def ws_session(stack: Stack, steps: list[dict[str, Any] | Callable[[list[Turn]], dict[str, Any]]]) -> list[Turn]:
    """Each step's `response.create` on one connection, the next sent once the last ended."""
    turns: list[Turn] = []
    with connect(_ws_url(stack), additional_headers={"Authorization": "Bearer unused"}) as socket:
        for step in steps:
            turns.append(_ws_turn(socket, step(turns) if callable(step) else step))
    return turns


def _check_ws_turns(spec: str, turns: list[Turn]) -> list[str]:
    """The events of every turn are valid; every terminal response is a valid response."""
    problems = [p for turn in turns for event in turn.events for p in _event_errors(spec, event, websocket=True)]
    problems += [p for turn in turns if turn.final is not None for p in _response_errors(spec, turn.final)]
    return problems


def _create(body: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.create", "model": MODEL, **body}


# -- the request templates over HTTP, SSE and WebSocket ------------------------------------------

@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("reasoning", [False, True], ids=["plain", "reasoning"])
@pytest.mark.parametrize("transport", ["http", "sse", "websocket"])
@pytest.mark.parametrize("template", TEMPLATES, ids=[t.id for t in TEMPLATES])
def test_request_templates(stacks, tokenizer, template, transport, reasoning, spec):
    stack = stacks[spec]
    stack.reset()
    stack.fake.queue(_answer(tokenizer, reasoning=reasoning, tool=template.tool))
    body = {"model": MODEL, **copy.deepcopy(template.body)}
    events: list[dict[str, Any]] | None = None
    if transport == "websocket":
        (turn,) = ws_session(stack, [_create(body)])
        problems = [p for event in turn.events for p in _event_errors(spec, event, websocket=True)]
        if template.rejected:
            assert turn.error is not None and turn.error_code == template.rejected, turn.events
            assert turn.error["status"] == 400 and not problems, problems
            return
        response, events = turn.final, turn.events
    elif transport == "sse":
        with httpx.stream("POST", stack.url + "/v1/responses", json={**body, "stream": True}, timeout=30) as answer:
            if template.rejected:
                answer.read()
                _assert_rejected(answer, template.rejected)
                return
            assert answer.status_code == 200
            events = sse_events(answer)
        problems = [p for event in events for p in _event_errors(spec, event, websocket=False)]
        response = next((e["response"] for e in reversed(events) if e["type"] in TERMINAL), None)
    else:
        answer = httpx.post(stack.url + "/v1/responses", json=body, timeout=30)
        if template.rejected:
            _assert_rejected(answer, template.rejected)
            return
        assert answer.status_code == 200, answer.text
        response, problems = answer.json(), []
    assert response is not None, "no terminal response"
    problems += _response_errors(spec, response) + _semantic(template, response, events)
    assert not problems, "\n".join(problems)
    kinds = [item["type"] for item in response["output"]]
    assert kinds == (["reasoning"] if reasoning else []) + ["function_call" if template.tool else "message"]
    if spec == "open-responses" and reasoning and events is not None:
        assert "response.reasoning.delta" in [e["type"] for e in events]


def _assert_rejected(answer: httpx.Response, code: str) -> None:
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == code
    assert openai_schema.errors("ErrorResponse", answer.json()) == []


def test_the_suites_phase_fixture_validates():
    """`response-output-phase-schema`: the suite's own response fixture (phases on assistant
    messages) is a valid ResponseResource under the pinned spec — the validator reads it right."""
    fixture = {
        "id": "resp_phase_schema", "object": "response", "created_at": 1764967971, "completed_at": 1764967972,
        "status": "completed", "incomplete_details": None, "model": MODEL, "previous_response_id": None,
        "instructions": None, "error": None, "tools": [], "tool_choice": "auto", "truncation": "disabled",
        "parallel_tool_calls": True, "text": {"format": {"type": "text"}}, "top_p": 1, "presence_penalty": 0,
        "frequency_penalty": 0, "top_logprobs": 0, "temperature": 1, "reasoning": {"effort": None, "summary": None},
        "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
        "max_output_tokens": None, "max_tool_calls": None, "store": True, "background": False,
        "service_tier": "default", "metadata": {}, "safety_identifier": None, "prompt_cache_key": None,
        "output": [{"id": f"msg_{phase}", "type": "message", "status": "completed", "role": "assistant", "phase": phase,
                    "content": [{"type": "output_text", "text": "four", "annotations": []}]}
                   for phase in ("commentary", "final_answer")],
    }
    assert open_responses_schema.errors("ResponseResource", fixture) == []
    assert open_responses_schema.errors("ResponseResource", {**fixture, "service_tier": 3}) != []


# -- the suite's WebSocket session tests ---------------------------------------------------------

@pytest.fixture(params=SPECS)
def spec(request) -> str:
    return request.param


@pytest.fixture
def stack(stacks, spec) -> Stack:
    stacks[spec].reset()
    return stacks[spec]


def test_websocket_sequential_responses(stack, spec, tokenizer):
    stack.fake.queue(_answer(tokenizer, reasoning=True, text="first"), _answer(tokenizer, reasoning=False, text="second"))
    turns = ws_session(stack, [_create({"store": False, "input": "Reply with exactly: first"}),
                               _create({"store": False, "input": "Reply with exactly: second"})])
    assert not _check_ws_turns(spec, turns)
    assert [t.final["status"] for t in turns] == ["completed", "completed"]
    assert turns[0].final["id"] != turns[1].final["id"]


def test_websocket_continuation(stack, spec, tokenizer):
    stack.fake.queue(_answer(tokenizer, reasoning=True, text="OK"), _answer(tokenizer, reasoning=False, text="cobalt"))
    turns = ws_session(stack, [
        _create({"store": False, "input": "Remember the code word: cobalt. Reply with OK."}),
        lambda done: _create({"store": False, "previous_response_id": done[0].final["id"],
                              "input": "What is the code word? Reply with only the code word."})])
    assert not _check_ws_turns(spec, turns)
    assert turns[1].final["status"] == "completed"
    assert turns[1].final["previous_response_id"] == turns[0].final["id"]
    # The continuation's prompt holds the first turn's exact tokens.
    first, second = stack.fake.requests
    assert second.body["token_ids"][:len(first.body["token_ids"])] == first.body["token_ids"]


def test_websocket_reconnect_store_false_recovery(stack, spec, tokenizer):
    stack.fake.queue(_answer(tokenizer, reasoning=False, text="OK"), _answer(tokenizer, reasoning=False, text="recovered"))
    (first,) = ws_session(stack, [_create({"store": False, "input": "Remember the code word: copper. Reply with OK."})])
    reconnect, recovery = ws_session(stack, [
        _create({"store": False, "previous_response_id": first.final["id"],
                 "input": "Try to continue after reconnect. Reply with exactly: reconnected"}),
        _create({"store": False, "input": [_user("The previous store:false chain could not continue after reconnect. "
                                                 "Start a new response and reply with exactly: recovered")]})])
    assert not _check_ws_turns(spec, [first, reconnect, recovery])
    assert reconnect.error_code == "previous_response_not_found"
    assert recovery.final["status"] == "completed"


def test_websocket_previous_response_not_found(stack, spec):
    (turn,) = ws_session(stack, [_create({"store": False, "previous_response_id": "resp_openresponses_missing_1",
                                          "input": "This should fail because the previous response is missing."})])
    assert not _check_ws_turns(spec, [turn])
    assert turn.error_code == "previous_response_not_found" and turn.error["status"] == 400
    assert stack.fake.requests == []


def test_websocket_failed_continuation_evicts_cache(stack, spec, tokenizer):
    stack.fake.queue(_answer(tokenizer, reasoning=True, text="OK"))
    turns = ws_session(stack, [
        _create({"store": False, "input": "Remember the code word: ember. Reply with OK."}),
        lambda done: _create({"store": False, "previous_response_id": done[0].final["id"], "input": [
            {"type": "function_call_output", "call_id": "call_openresponses_missing",
             "output": "No matching tool call exists in the previous response."}]}),
        lambda done: _create({"store": False, "previous_response_id": done[0].final["id"],
                              "input": "Try to continue after the failed turn. Reply with exactly: stale"})])
    assert not _check_ws_turns(spec, turns)
    first, failed, retry = turns
    assert first.final["status"] == "completed"
    assert failed.failed and failed.error["status"] == 400
    assert retry.error_code == "previous_response_not_found"
    assert len(stack.fake.requests) == 1


def test_websocket_failed_generation_evicts_cache(stack, spec, tokenizer):
    """A continuation that fails while generating (the replica errors) evicts as well."""
    stack.fake.queue(_answer(tokenizer, reasoning=False, text="OK"),
                     Script(ids(tokenizer, "partial"), error_after=1))
    turns = ws_session(stack, [
        _create({"store": False, "input": "Remember: ember."}),
        lambda done: _create({"store": False, "previous_response_id": done[0].final["id"], "input": "Go on."}),
        lambda done: _create({"store": False, "previous_response_id": done[0].final["id"], "input": "Again."})])
    assert not _check_ws_turns(spec, turns)
    assert turns[1].failed
    assert turns[2].error_code == "previous_response_not_found"


COMPACT_CONVERSATION = [
    {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Remember the compaction code word: slate."}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "OK."}]},
    {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Compress this conversation for later continuation."}]},
]


def test_websocket_compact_new_chain(stack, spec, tokenizer):
    stack.fake.queue(_answer(tokenizer, reasoning=True, text="The code word is slate."),
                     _answer(tokenizer, reasoning=False, text="compacted"))
    answer = httpx.post(stack.url + "/v1/responses/compact", json={"model": MODEL, "input": COMPACT_CONVERSATION},
                        timeout=30)
    assert answer.status_code == 200, answer.text
    compacted = answer.json()
    assert not _compact_errors(spec, compacted)
    (turn,) = ws_session(stack, [_create({"store": False, "tools": [], "input": [
        *compacted["output"], _user("Continue from here. Reply with exactly: compacted")]})])
    assert not _check_ws_turns(spec, [turn])
    assert turn.final["status"] == "completed" and turn.final["output"]


# -- the suite's compaction endpoint tests ---------------------------------------------------------

def test_compact_response(stack, spec, tokenizer):
    script = _answer(tokenizer, reasoning=True, text="Launch Tuesday; notify support first.")
    stack.fake.queue(script)
    body = {"model": MODEL, "prompt_cache_key": "openresponses-compact-test", "input": [
        _user("We agreed to launch on Tuesday and notify support first."),
        {"type": "message", "role": "assistant",
         "content": "Understood. The launch is Tuesday, with support notified beforehand."}]}
    answer = httpx.post(stack.url + "/v1/responses/compact", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    compacted = answer.json()
    problems = _compact_errors(spec, compacted)
    assert not problems, "\n".join(problems)
    assert compacted["object"] == "response.compaction"
    assert [item["type"] for item in compacted["output"]].count("compaction") == 1
    (request,) = stack.fake.requests  # the summary turn, generated by the model
    assert compacted["usage"]["output_tokens"] == len(script.token_ids)
    assert compacted["usage"]["input_tokens"] == len(request.body["token_ids"])


def test_compact_missing_model(stack, spec):
    answer = httpx.post(stack.url + "/v1/responses/compact", json={"input": [_user("Compact this conversation.")]},
                        timeout=30)
    assert answer.status_code in (400, 422), answer.text
    assert answer.json()["error"]["param"] == "model"
    assert openai_schema.errors("ErrorResponse", answer.json()) == []
    assert stack.fake.requests == []


def test_sampling_values_echoed_are_the_ones_used(qwen_tokenizer_dir, tokenizer, tmp_path):
    """`temperature` and `top_p` a request leaves out are the model's generation defaults (its
    generation_config.json): what the replica was asked to sample with, and what the response says."""
    (tmp_path / "generation_config.json").write_text('{"temperature": 0.6, "top_p": 0.95, "top_k": 20}')
    with fake_stack(tmp_path, tokenizer=str(qwen_tokenizer_dir), served_model_name=MODEL) as stack:
        stack.fake.queue(_answer(tokenizer, reasoning=False), _answer(tokenizer, reasoning=False))
        default = httpx.post(stack.url + "/v1/responses", json={"model": MODEL, "input": "hi"}, timeout=30).json()
        sent = stack.fake.requests[-1].body
        chosen = httpx.post(stack.url + "/v1/responses", json={"model": MODEL, "input": "hi", "temperature": 0.2,
                                                               "presence_penalty": 0.5}, timeout=30).json()
    assert (default["temperature"], default["top_p"]) == (0.6, 0.95)
    assert (sent["sampling_params"]["temperature"], sent["sampling_params"]["top_p"]) == (0.6, 0.95)
    assert (chosen["temperature"], chosen["top_p"], chosen["presence_penalty"]) == (0.2, 0.95, 0.5)
    assert open_responses_schema.errors("ResponseResource", default) == []
