"""Mutated Responses, Chat and Anthropic Messages bodies and WebSocket frames against a running
gateway: never a 5xx, never a cut stream, every error in the API's own shape (OpenAI's naming the
parameter at fault; Anthropic's `{"type": "error", "error": {"type", "message"}}`).

Derandomized and CI-sized; each example takes a valid body (Codex's own captured requests
among them), replaces, drops or adds one value somewhere in it, and sends it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect

CODEX = Path(__file__).parents[1] / "data" / "codex"
MODEL = "tiny-qwen3"
CHAT = {"model": MODEL, "messages": [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                                                         "function": {"name": "ls", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}],
    "tools": [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}],
    "max_tokens": 4, "temperature": 0.5, "top_k": 20, "seed": 3}
RESPONSES = {"model": MODEL, "instructions": "be brief", "max_output_tokens": 4, "top_p": 0.9,
             "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                       {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "t"}]},
                       {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
                       {"type": "function_call_output", "call_id": "c1", "output": "a.txt"}],
             "tools": [{"type": "function", "name": "ls", "parameters": {"type": "object"}}],
             "metadata": {"k": "v"}, "text": {"format": {"type": "text"}}, "reasoning": {"effort": "low"}}


MESSAGES = {"model": MODEL, "max_tokens": 4, "system": [{"type": "text", "text": "be brief"}],
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": ""},
                                                  {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"},
                                             {"type": "text", "text": "go on"}]}],
            "tools": [{"name": "ls", "description": "list", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 1024},
            "temperature": 0.5, "top_k": 20, "metadata": {"user_id": "u"}}
ANTHROPIC_ERRORS = {"invalid_request_error", "authentication_error", "permission_error", "not_found_error",
                    "request_too_large", "rate_limit_error", "api_error", "overloaded_error"}


def _codex(name: str) -> dict[str, Any]:
    body = json.loads((CODEX / name).read_text())
    return {**body, "model": MODEL}


SEEDS = {"/v1/responses": [RESPONSES, _codex("http_2b_toolcall_second_request_full_history.json"),
                           _codex("http_3_reasoning_item_echoed.json")],
         "/v1/chat/completions": [CHAT],
         "/v1/messages": [MESSAGES], "/v1/messages/count_tokens": [MESSAGES]}

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
                    st.sampled_from(["message", "user", "assistant", "input_text", "function_call", "refusal",
                                     "reasoning", "", "auto", "none", "c1"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=6)


def _deep(levels: int) -> Any:
    node: Any = 1
    for _ in range(levels):
        node = {"a": node}
    return node


@st.composite
def mutated(draw: st.DrawFn, seeds: list[dict[str, Any]]) -> dict[str, Any]:
    body = json.loads(json.dumps(draw(st.sampled_from(seeds))))
    paths: list[list[Any]] = []

    def walk(node: Any, path: list[Any]) -> None:
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in children:
            paths.append([*path, key])
            walk(child, [*path, key])

    walk(body, [])
    path = draw(st.sampled_from(paths))
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    action = draw(st.sampled_from(["replace", "replace", "drop", "add", "deep"]))
    if action == "drop":
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[draw(st.sampled_from(["bogus", "top_k", "seed", "min_p", "role", "type", "content"]))] = draw(values)
    else:
        parent[path[-1]] = _deep(300) if action == "deep" else draw(values)
    body["stream"] = draw(st.booleans()) if "stream" not in path[:1] else body.get("stream")
    return body


def assert_clean(response: httpx.Response, streamed: bool, path: str = "") -> None:
    assert response.status_code < 500, response.text
    if path.startswith("/v1/messages"):
        assert_anthropic_clean(response, streamed and path == "/v1/messages")
        return
    if response.status_code != 200:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert isinstance(error["param"], str) and error["param"], error
        return
    if not streamed:
        response.json()
        return
    lines = [line for line in response.text.splitlines() if line.startswith("data:")]
    last = lines[-1][5:].strip()
    if last == "[DONE]":
        return
    final = json.loads(last)["type"]
    assert final in ("response.completed", "response.incomplete", "response.failed"), final


def assert_anthropic_clean(response: httpx.Response, streamed: bool) -> None:
    if response.status_code != 200:
        body = response.json()
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
        assert body["error"]["type"] in ANTHROPIC_ERRORS and body["error"]["message"], body
        return
    if not streamed:
        body = response.json()
        assert body["type"] == "message" if "type" in body else isinstance(body["input_tokens"], int), body
        return
    events = [line[6:].strip() for line in response.text.splitlines() if line.startswith("event:")]
    assert events[-1] in ("message_stop", "error"), events  # an end, not a cut stream


FUZZ = settings(derandomize=True, max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.parametrize("path", list(SEEDS))
def test_mutated_bodies_get_clean_answers(stack, path):
    @FUZZ
    @given(body=mutated(SEEDS[path]))
    def check(body: dict[str, Any]) -> None:
        response = httpx.post(stack.url + path, content=json.dumps(body), timeout=30,
                              headers={"content-type": "application/json"})
        assert_clean(response, body.get("stream") is True, path)

    check()


def test_mutated_websocket_frames_get_clean_answers(stack):
    url = stack.url.replace("http", "ws") + "/v1/responses"

    @settings(FUZZ, max_examples=100)
    @given(body=mutated(SEEDS["/v1/responses"]))
    def check(body: dict[str, Any]) -> None:
        async def send() -> dict[str, Any]:
            async with connect(url, max_size=None) as ws:
                await ws.send(json.dumps({**body, "type": "response.create"}))
                while True:
                    event = json.loads(await ws.recv())
                    if event["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
                        return event

        event = asyncio.run(send())
        if event["type"] == "error":
            assert event["status"] < 500, event
            assert isinstance(event["error"]["param"], str) and event["error"]["param"], event

    check()
