import json
from pathlib import Path

import pytest

from gateway.adapters.responses.input import parse_request
from gateway.core.conversation import Message, Reasoning, ToolCall, ToolOutput
from gateway.core.errors import APIError

CODEX = Path(__file__).parents[2] / "data" / "codex"


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


NESTED: dict = {}
_node = NESTED
for _ in range(300):
    _node["a"] = {}
    _node = _node["a"]


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"input": "x"}, "model", "Missing required parameter: 'model'"),
        ({"model": "m", "input": ""}, "input", "must not be empty"),
        ({"model": "m", "input": []}, "input", "must not be empty"),
        ({"model": "m", "input": 3}, "input", "expected a string or an array, but got an integer"),
        ({"model": "m", "input": "x", "temperature": "hot"}, "temperature", "expected a number"),
        ({"model": "m", "input": "x", "temperature": 3}, "temperature", "less than or equal to 2"),
        ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens", "greater than or equal to 1"),
        ({"model": "m", "input": [{"type": "message", "role": "robot", "content": "x"}]}, "input[0].role",
         "'robot'"),
        ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         "input[0].content[0].image_url", "not a data URL"),
        ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
         "input[0].content[0]", "input_file"),
        ({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
         "input[0].call_id", "Missing required parameter"),
        ({"model": "m", "input": [{"type": "teleport"}]}, "input[0].type", "'teleport'"),
        ({"model": "m", "input": "x", "tool_choice": "sometimes"}, "tool_choice", "'sometimes'"),
        ({"model": "m", "input": "x", "tool_choice": 5}, "tool_choice", "expected a string or an object"),
        ({"model": "m", "input": "x", "tool_choice": {"type": "web_search_preview"}}, "tool_choice.type",
         "'web_search_preview' tool, which this gateway does not offer"),
        ({"model": "m", "input": "x", "tool_choice": {"type": "allowed_tools", "mode": "auto",
                                                       "tools": [{"type": "web_search"}]}},
         "tool_choice.tools[0]", "must name a function or custom tool"),
        ({"model": "m", "input": "x", "tools": [5]}, "tools[0]", "expected an object, but got an integer"),
        ({"model": "m", "input": "x", "tools": [{"name": "f"}]}, "tools[0].type", "Missing required parameter"),
        ({"model": "m", "input": "x", "tools": [{"type": "custom", "name": "p", "format": {
            "type": "grammar", "syntax": "ebnf", "definition": "x"}}]}, "tools[0].format.syntax", "'lark' or 'regex'"),
        ({"model": "m", "input": "x", "tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "function"}]}]},
         "tools[0].tools[0].name", "Missing required parameter"),
        ({"model": "m", "input": "x", "tools": [{"type": "mcp", "server_label": "a", "headers": {"k": 1}}]},
         "tools[0].headers.k", "expected a string, but got an integer"),
        ({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type",
         "expected 'text', 'json_object', 'json_schema'"),
        ({"model": "m", "input": "x", "truncation": "sideways"}, "truncation", "'auto' or 'disabled'"),
        ({"model": "m", "input": "x", "tools": [{"type": "file_search"}]}, "tools[0].vector_store_ids",
         "Missing required parameter"),
        # what the fuzzer found answering 500s
        ({"model": "m", "input": [{"type": "reasoning", "content": "thought"}]}, "input[0].content",
         "expected an array, but got a string"),
        ({"model": "m", "input": [{"role": "user", "content": [{"type": {"a": 1}, "text": "x"}]}]},
         "input[0].content[0].type", "expected a string, but got an object"),
        ({"model": "m", "input": [{"role": "assistant", "content": [{"type": "refusal", "refusal": 5}]}]},
         "input[0].content[0].refusal", "expected a string, but got an integer"),
        ({"model": "m", "input": "x", "metadata": NESTED}, "metadata", "nested deeper than"),
        ({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f", "parameters": NESTED}]},
         "tools", "nested deeper than"),
        ({"model": "m", "input": "x", "top_k": -5}, "top_k", "greater than or equal to -1"),
        ({"model": "m", "input": "x", "min_p": 5}, "min_p", "less than or equal to 1"),
        ({"model": "m", "input": "x", "repetition_penalty": -1}, "repetition_penalty", "greater than 0"),
        ({"model": "m", "input": "x", "seed": 2**63}, "seed", "less than 9223372036854775808"),
        ({"model": "m", "input": "x", "top_p": 0}, "top_p", "greater than 0"),
        ({"model": "m", "input": "x", "stream": "yes"}, "stream", "expected a boolean, but got a string"),
        ({"model": "m", "input": "x", "temprature": 1, "bogus": 2}, "temprature", "'temprature', 'bogus'"),
        ({"model": "m", "input": "x", "rollout_id": "r", "response_mask": [1, 0.5]}, "response_mask[1]",
         "expected an integer"),
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
