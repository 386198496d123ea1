"""Gemma 4 through the whole gateway (real SDK, scripted vLLM): a reasoned call comes back as a
Chat tool call and as Responses items, and the next turn's prompt goes on from the model's own ids
with the tool result written into the same model turn."""

from __future__ import annotations

import json

import pytest

from tests.support.fake_vllm import Script
from tests.support.gemma4 import KNOWN_IDS, gemma4_tokenizer_dir
from tests.support.parse_events import marked_ids
from tests.support.stack import fake_stack

GENERATE = "/inference/v1/generate"
TOOLS = [{"type": "function", "name": "exec_command", "description": "Run a shell command",
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]
MARKUP = {t: KNOWN_IDS[t] for t in ("<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>", "<channel|>",
                                      "<|tool_response>", "<turn|>")}
OUTPUT = '<|channel>thought\nCheck.<channel|><|tool_call>call:exec_command{cmd:<|"|>ls -a<|"|>}<tool_call|><|tool_response>'


@pytest.fixture(scope="module")
def stack():
    with fake_stack(gemma4_tokenizer_dir(), served_model_name="gemma") as stack:
        yield stack


@pytest.fixture(scope="module")
def tokenizer(stack):
    return stack.runtime.format.tokenizer


def test_chat_returns_the_call_and_the_reasoning(stack, tokenizer):
    stack.fake.queue(Script(marked_ids(tokenizer, OUTPUT, MARKUP, split="bytes")))
    chat_tools = [{"type": "function", "function": {k: v for k, v in TOOLS[0].items() if k != "type"}}]
    completion = stack.client().chat.completions.create(
        model="gemma", messages=[{"role": "user", "content": "list"}], tools=chat_tools)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "exec_command" and json.loads(call.function.arguments) == {"cmd": "ls -a"}
    assert choice.message.model_extra["reasoning"] == "Check."
    assert set(stack.fake.bodies(GENERATE)[-1]["sampling_params"]["stop_token_ids"]) == {1, 106, 50}


def test_the_tool_result_goes_on_from_the_model_s_ids(stack, tokenizer):
    client = stack.client()
    output = marked_ids(tokenizer, OUTPUT, MARKUP, split="bytes")
    stack.fake.queue(Script(output))
    first = client.responses.create(model="gemma", input="list", tools=TOOLS, extra_body={"return_token_ids": True})
    assert [item.type for item in first.output] == ["reasoning", "function_call"]
    call = first.output[1]
    stack.fake.queue(Script(marked_ids(tokenizer, "Two files.<turn|>", MARKUP)))
    second = client.responses.create(model="gemma", previous_response_id=first.id, tools=TOOLS,
                                     input=[{"type": "function_call_output", "call_id": call.call_id, "output": "a b"}])
    assert second.output_text == "Two files."
    prompt = stack.fake.bodies(GENERATE)[-1]["token_ids"]
    before = first.model_extra["prompt_token_ids"] + output
    assert prompt[:len(before)] == before
    assert tokenizer.decode(prompt[len(before):]) == (
        'response:exec_command{value:<|"|>a b<|"|>}<tool_response|><|channel>thought\n<channel|>')
