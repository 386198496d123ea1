"""Codex's item and tool shapes in, as canonical items; the real captures in tests/data/codex."""

import json
import logging
from pathlib import Path

import pytest

from gateway.adapters import reasoning_blob
from gateway.adapters.responses.input import parse_request
from gateway.core.conversation import Reasoning, Tool, ToolCall, ToolOutput

CODEX = Path(__file__).parent.parent / "data" / "codex"


def codex_body(name: str) -> dict:
    return json.loads((CODEX / name).read_text())["body"]


@pytest.mark.parametrize("name", sorted(p.name for p in CODEX.glob("http_*.json")))
def test_every_http_capture_parses(name):
    body = codex_body(name)
    parsed = parse_request(body)
    assert parsed.conversation.items
    assert parsed.echo["tools"] == body.get("tools", [])  # echoed untouched


def test_custom_tool_and_its_call_and_output():
    body = codex_body("http_4_custom_tool_apply_patch_roundtrip_gpt55.json")
    conversation = parse_request(body).conversation
    assert [t.name for t in conversation.tools] == [  # tool_search and web_search are not offered
        "exec_command", "write_stdin", "request_user_input", "apply_patch", "view_image", "get_goal",
        "create_goal", "update_goal"]
    (apply_patch,) = [t for t in conversation.tools if t.name == "apply_patch"]
    raw = body["tools"][3]
    assert apply_patch.parameters == {"type": "object", "properties": {"input": {"type": "string"}},
                                      "required": ["input"]}
    assert apply_patch.description.startswith(raw["description"])
    assert apply_patch.description.endswith("grammar:\n" + raw["format"]["definition"])
    patch = "*** Begin Patch\n*** Add File: patched.txt\n+patched by custom tool\n*** End Patch\n"
    call, output = conversation.items[-2:]
    assert call == ToolCall(call_id="call_1f083fc648f4", name="apply_patch", arguments=json.dumps({"input": patch}))
    assert output == ToolOutput(call_id="call_1f083fc648f4", name="apply_patch",
                                output="Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated the following "
                                       "files:\nA patched.txt\n")


def test_namespace_tools_are_flattened():
    body = codex_body("http_1_simple_text_request.json")
    (namespace,) = [t for t in body["tools"] if t["type"] == "namespace"]
    tools = {t.name: t for t in parse_request(body).conversation.tools}
    inner = namespace["tools"]
    assert len(inner) > 1 and len(tools) == len(body["tools"]) - 2 + len(inner)  # minus namespace, web_search
    for raw in inner:
        assert tools["multi_agent_v1__" + raw["name"]] == Tool(
            name="multi_agent_v1__" + raw["name"], description=raw["description"], parameters=raw["parameters"],
            strict=raw["strict"])


def test_a_namespaced_function_call_in_the_history_uses_the_flat_name():
    body = {"model": "m", "input": [
        {"type": "function_call", "call_id": "c1", "name": "close_agent", "namespace": "multi_agent_v1",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "closed"}]}
    assert parse_request(body).conversation.items == [
        ToolCall(call_id="c1", name="multi_agent_v1__close_agent", arguments="{}"),
        ToolOutput(call_id="c1", output="closed", name="multi_agent_v1__close_agent")]


def test_local_shell_call_and_output():
    action = {"type": "exec", "command": ["ls", "-la"], "env": {}, "working_directory": "/tmp"}
    body = {"model": "m", "input": [
        {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_9", "status": "completed", "action": action},
        {"type": "local_shell_call_output", "id": "call_9", "output": "total 0\n"}]}
    assert parse_request(body).conversation.items == [
        ToolCall(call_id="call_9", name="local_shell", arguments=json.dumps(action)),
        ToolOutput(call_id="call_9", output="total 0\n", name="local_shell")]


def test_foreign_reasoning_blob_is_ignored_with_a_warning(caplog):
    body = codex_body("http_3_reasoning_item_echoed.json")
    with caplog.at_level(logging.WARNING, logger="gateway.adapters.responses.input"):
        items = parse_request(body).conversation.items
    assert Reasoning(text="raw chain of thought here") in items  # from `content`
    assert any("encrypted_content" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_the_gateway_blob_wins_over_content_and_restores_the_exact_text(caplog):
    text = "  First, look at the file.\n\nThen patch it.  "
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": reasoning_blob.seal(text)}
    body = {"model": "m", "input": [{"type": "message", "role": "user", "content": "go"}, reasoning]}
    with caplog.at_level(logging.WARNING):
        assert parse_request(body).conversation.items[-1] == Reasoning(text=text)  # no `content` at all
        edited = {**reasoning, "content": [{"type": "reasoning_text", "text": "edited"}]}
        assert parse_request({**body, "input": [body["input"][0], edited]}).conversation.items[-1] == Reasoning(
            text=text)
    assert not caplog.records
