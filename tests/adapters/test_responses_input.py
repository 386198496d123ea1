import json
from pathlib import Path

import pytest

from gateway.adapters.responses_input import parse_request
from gateway.core.conversation import Message, Reasoning, ToolCall, ToolOutput
from gateway.core.errors import APIError

CODEX = Path(__file__).parent.parent / "data" / "codex"


def codex_body(name: str) -> dict:
    return json.loads((CODEX / name).read_text())["body"]


def test_string_input_becomes_one_user_message():
    parsed = parse_request({"model": "m", "input": "hi", "instructions": "be brief"})
    assert parsed.conversation.items == [Message(role="user", text="hi")]
    assert parsed.conversation.instructions == "be brief"
    assert parsed.stream is False


def test_codex_history_first_developer_message_is_the_instructions():
    body = codex_body("http_2b_toolcall_second_request_full_history.json")
    parsed = parse_request(body)
    conv = parsed.conversation
    assert conv.instructions == body["input"][0]["content"][0]["text"]
    assert [type(i).__name__ for i in conv.items] == ["Message", "Message", "Message", "ToolCall", "ToolOutput"]
    assert conv.items[0].role == "developer"  # the second developer message stays an item
    call, output = conv.items[3], conv.items[4]
    assert call == ToolCall(call_id="call_e51ce342df1c", name="exec_command",
                            arguments='{"cmd": "echo hello-from-tool > tool_out.txt && cat tool_out.txt"}')
    assert isinstance(output, ToolOutput) and output.name == "exec_command"
    assert output.output.endswith("hello-from-tool\n")
    assert parsed.prompt_cache_key == body["prompt_cache_key"]
    assert {t.name for t in conv.tools} >= {"exec_command", "write_stdin"}  # web_search dropped


def test_reasoning_item_text_is_kept():
    parsed = parse_request(codex_body("http_3_reasoning_item_echoed.json"))
    reasoning = [i for i in parsed.conversation.items if isinstance(i, Reasoning)]
    assert reasoning == [Reasoning(text="raw chain of thought here")]


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"input": "x"}, "model", "expected a string, but got null"),
        ({"model": "m", "input": ""}, "input", "must not be empty"),
        ({"model": "m", "input": []}, "input", "must not be empty"),
        ({"model": "m", "input": 3}, "input", "expected an array, but got an integer"),
        ({"model": "m", "input": "x", "temperature": "hot"}, "temperature", "expected a number"),
        ({"model": "m", "input": "x", "temperature": 3}, "temperature", "between 0 and 2"),
        ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens", "at least 1"),
        ({"model": "m", "input": [{"type": "message", "role": "robot", "content": "x"}]}, "input[0].role",
         "'robot'"),
        ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         "input[0].content[0]", "accepts text only"),
        ({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
         "input[0].call_id", "expected a string"),
        ({"model": "m", "input": [{"type": "teleport"}]}, "input[0].type", "'teleport'"),
        ({"model": "m", "input": "x", "tool_choice": "sometimes"}, "tool_choice", "'sometimes'"),
    ],
)
def test_bad_requests_name_the_parameter(body, param, fragment):
    with pytest.raises(APIError) as info:
        parse_request(body)
    assert info.value.status == 400
    assert info.value.param == param
    assert fragment in info.value.message


def test_logprobs_are_requested_only_when_needed():
    assert parse_request({"model": "m", "input": "x"}).sampling.logprobs is None
    assert parse_request({"model": "m", "input": "x", "return_token_ids": True}).sampling.logprobs == 0
    assert parse_request({"model": "m", "input": "x", "top_logprobs": 3}).sampling.logprobs == 3


def test_tool_output_without_its_call_is_a_400():
    body = {"model": "m", "input": [{"type": "function_call_output", "call_id": "call_x", "output": "hi"}]}
    with pytest.raises(APIError) as info:
        parse_request(body)
    assert info.value.param == "input[0].call_id" and "call_x" in info.value.message
