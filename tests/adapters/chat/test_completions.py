"""POST /v1/chat/completions: the same turn pipeline behind the Chat Completions shape."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_THINK, END_TOOL_CALL, IM_END, THINK, TOOL_CALL, ids

GENERATE = "/inference/v1/generate"
TOOLS = [{"type": "function", "function": {"name": "exec_command", "description": "Run a shell command",
                                           "parameters": {"type": "object",
                                                          "properties": {"cmd": {"type": "string"}}}}}]


def tool_call_output(tokenizer):
    return [THINK, *ids(tokenizer, "\nCheck.\n"), END_THINK, *ids(tokenizer, "\n\n"), TOOL_CALL,
            *ids(tokenizer, '\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n'), END_TOOL_CALL, IM_END]


def test_non_streaming_tool_call_with_reasoning_and_token_ids(stack, tokenizer):
    fake, client = stack.fake, stack.client()
    output = tool_call_output(tokenizer)
    fake.queue(Script(output, logprobs=[-0.5] * len(output)))
    completion = client.chat.completions.create(
        model="tiny-qwen3", messages=[{"role": "user", "content": "list"}], tools=TOOLS, logprobs=True,
        extra_body={"return_token_ids": True})
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "exec_command" and json.loads(call.function.arguments) == {"cmd": "ls"}
    assert choice.message.model_extra["reasoning"] == "Check."
    assert completion.model_extra["prompt_token_ids"] == fake.bodies(GENERATE)[-1]["token_ids"]
    assert choice.model_extra["token_ids"] == output
    assert [entry.logprob for entry in choice.logprobs.content] == [-0.5] * len(output)
    assert completion.usage.completion_tokens == len(output)


def test_streaming_chunks_and_usage(stack, tokenizer):
    fake, client = stack.fake, stack.client()
    fake.queue(Script(ids(tokenizer, "Hello there") + [IM_END]))
    chunks = list(client.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "hi"}],
                                                 stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3


def test_streamed_tool_call_deltas(stack, tokenizer):
    fake, client = stack.fake, stack.client()
    fake.queue(Script(tool_call_output(tokenizer)))
    chunks = list(client.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "x"}],
                                                 tools=TOOLS, stream=True))
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].function.name == "exec_command" and calls[0].id.startswith("call_")
    assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == {"cmd": "ls"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_history_with_tool_results_renders_like_the_template(stack, tokenizer):
    fake, client = stack.fake, stack.client()
    fake.queue(Script(ids(tokenizer, "done") + [IM_END]))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "list"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "exec_command",
                                                                       "arguments": '{"cmd": "ls"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"}]
    client.chat.completions.create(model="tiny-qwen3", messages=messages, tools=TOOLS)
    expected = tokenizer.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=True,
                                             return_dict=False)
    assert fake.bodies(GENERATE)[-1]["token_ids"] == list(expected)


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "tiny-qwen3", "messages": []}, "messages"),
    ({"model": "tiny-qwen3", "messages": [{"role": "user", "content": "x"}], "n": 17, "stream": True}, "n"),
    ({"model": "tiny-qwen3", "messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]},
     "messages[0].tool_call_id"),
    ({"model": "tiny-qwen3", "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function"}},
     "tool_choice.function"),
    ({"model": "tiny-qwen3", "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0].function.name"),
    ({"model": "tiny-qwen3", "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "custom", "custom": {"name": "p", "format": {"type": "grammar", "grammar": {
          "syntax": "lark"}}}}]}, "tools[0].custom.format.grammar.definition"),
])
def test_bad_chat_requests(stack, body, param):
    url = stack.url
    response = httpx.post(url + "/v1/chat/completions", json=body)
    assert response.status_code == 400 and response.json()["error"]["param"] == param
