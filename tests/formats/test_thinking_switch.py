"""A per-request thinking switch: `reasoning.effort` "none"/"minimal" (Responses, Chat's `reasoning_effort`)
or Chat's `chat_template_kwargs: {"enable_thinking": false}` (vLLM's convention) render a template that has
the switch exactly as `apply_chat_template(..., enable_thinking=False)` does, per family, and the output
parser starts where that generation prompt leaves the model."""

from __future__ import annotations

import dataclasses
import random

import httpx
import pytest

from gateway.core.conversation import Conversation, Message
from gateway.formats._shared import qwen_messages, with_argument_dicts
from gateway.formats.hf.format import HFChatFormat
from gateway.formats.hf.render import hf_messages
from tests.formats.test_qwen_xml_render import conversation as random_conversation
from tests.support.fake_vllm import Script
from tests.support.parse_events import feed, items
from tests.support.stack import fake_stack

FAMILIES = [("qwen_format", "qwen_tokenizer"), ("qwen36_format", "qwen36_tokenizer"),
            ("glm_format", "glm_tokenizer"), ("deepseek_format", "deepseek_tokenizer"),
            ("kimi_k3_format", "kimi_k3_tokenizer")]
# How each family's template takes `hf_messages` (its own reshaping, as its render test does)
PREPARE = {"qwen36_format": qwen_messages, "glm_format": with_argument_dicts,
           "kimi_k3_format": with_argument_dicts}
SWITCH = {"kimi_k3_format": "thinking"}  # the template's variable, where not `enable_thinking`


def reference_ids(family: str, tokenizer, conversation: Conversation, **kwargs) -> list[int]:
    if kwargs.pop("enable_thinking", True) is False:
        kwargs[SWITCH.get(family, "enable_thinking")] = False
    messages, tools = hf_messages(conversation)
    messages = PREPARE.get(family, lambda m: m)(messages)
    return tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=True, add_generation_prompt=True,
                                         return_dict=False, **kwargs)


@pytest.mark.parametrize(("family", "vocabulary"), FAMILIES)
@pytest.mark.parametrize("effort", ["none", "minimal"])
def test_thinking_off_renders_as_the_template_does_with_the_switch_off(request, family, vocabulary, effort):
    fmt, tok = request.getfixturevalue(family), request.getfixturevalue(vocabulary)
    rng = random.Random(4040)
    for n in range(150):
        case = dataclasses.replace(random_conversation(rng), reasoning_effort=effort)
        assert fmt.render(case) == reference_ids(family, tok, case, enable_thinking=False), (n, case)


@pytest.mark.parametrize(("family", "vocabulary"), FAMILIES)
def test_other_efforts_keep_the_template_s_default(request, family, vocabulary):
    fmt, tok = request.getfixturevalue(family), request.getfixturevalue(vocabulary)
    case = Conversation(items=[Message("user", "hi")], reasoning_effort="high")
    assert fmt.render(case) == reference_ids(family, tok, case)


def test_the_switch_changes_the_generation_prompt(qwen36_format, qwen_format, glm_format):
    on, off = Conversation(items=[Message("user", "hi")]), Conversation(items=[Message("user", "hi")],
                                                                        reasoning_effort="none")
    assert qwen36_format.decode(qwen36_format.render(on)).endswith("<|im_start|>assistant\n<think>\n")
    assert qwen36_format.decode(qwen36_format.render(off)).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert qwen_format.decode(qwen_format.render(off)).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert glm_format.decode(glm_format.render(off)).endswith("<|assistant|>\n<think></think>")


def test_the_parser_starts_where_the_prompt_leaves_the_model(qwen36_format, qwen36_tokenizer):
    """Qwen3.6 opens `<think>` in its default generation prompt and closes it with the switch off."""
    ids = qwen36_tokenizer.encode("Hello there.")
    assert items(feed(qwen36_format.parser(), ids)) == [("reasoning", None, "Hello there.")]
    assert items(feed(qwen36_format.parser(thinking=False), ids)) == [("text", None, "Hello there.")]


def test_kimi_k3_s_switch_opens_the_response_channel_and_the_parser_starts_there(kimi_k3_format, kimi_k3_tokenizer):
    off = Conversation(items=[Message("user", "hi")], reasoning_effort="none")
    assert kimi_k3_format.decode(kimi_k3_format.render(off)).endswith(
        '<|open|>message role="assistant"<|sep|><|open|>response<|sep|>')
    ids = kimi_k3_tokenizer.encode("Hello there.")
    assert items(feed(kimi_k3_format.parser(), ids)) == [("reasoning", None, "Hello there.")]
    assert items(feed(kimi_k3_format.parser(thinking=False), ids)) == [("text", None, "Hello there.")]
    plain = HFChatFormat(kimi_k3_tokenizer, reasoning_parser="none")  # reasoning is text, as ever with none
    assert items(feed(plain.parser(), ids)) == [("text", None, "Hello there.")]


def test_kimi_k2_thinking_has_no_switch_and_renders_as_ever(kimi_format):
    case = Conversation(items=[Message("user", "hi")])
    assert kimi_format.render(dataclasses.replace(case, reasoning_effort="none")) == kimi_format.render(case)


@pytest.fixture(scope="module")
def qwen36_stack():
    from tests.support.qwen36 import qwen36_tokenizer_dir

    with fake_stack(qwen36_tokenizer_dir(), served_model_name="m") as stack:
        yield stack


@pytest.mark.parametrize("switch", [{"chat_template_kwargs": {"enable_thinking": False}},
                                    {"chat_template_kwargs": {"thinking": False}},  # Kimi-K3's, DeepSeek's name
                                    {"reasoning_effort": "none"}])
def test_chat_requests_turn_thinking_off(qwen36_stack, qwen36_tokenizer, switch):
    stack = qwen36_stack
    stack.fake.requests.clear()
    stack.fake.queue(Script([*qwen36_tokenizer.encode("Hello there."), qwen36_tokenizer.convert_tokens_to_ids(
        "<|im_end|>")]))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **switch}
    reply = httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    message = reply.json()["choices"][0]["message"]
    assert message["content"] == "Hello there." and not message.get("reasoning_content")
    prompt = stack.fake.bodies("/inference/v1/generate")[-1]["token_ids"]
    assert qwen36_tokenizer.decode(prompt).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_responses_requests_turn_thinking_off(qwen36_stack, qwen36_tokenizer):
    stack = qwen36_stack
    stack.fake.queue(Script([*qwen36_tokenizer.encode("Hello there."), qwen36_tokenizer.convert_tokens_to_ids(
        "<|im_end|>")]))
    body = {"model": "m", "input": "hi", "reasoning": {"effort": "minimal"}}
    reply = httpx.post(stack.url + "/v1/responses", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    assert [item["type"] for item in reply.json()["output"]] == ["message"]
    assert reply.json()["output"][0]["content"][0]["text"] == "Hello there."
