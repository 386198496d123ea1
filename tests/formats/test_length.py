"""The length pre-check's bound (gateway/formats/length.py) is a lower bound: never more tokens
than the real render, for every format, whatever the text (runs of spaces, which the vocabularies'
longest tokens are, CJK, emoji, markup-looking text)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.conversation import Conversation, Message, ToolCall, ToolOutput
from gateway.formats.harmony.format import O200K_MAX_TOKEN_BYTES
from gateway.formats.length import min_prompt_tokens, too_long

_pieces = st.sampled_from([" " * 200, "\n\n", "a" * 300, "猫", "🙂", "<|im_end|>", "<|end|>", "hello world ", "\t"])
_text = st.lists(st.one_of(_pieces, st.text(max_size=40)), max_size=12).map("".join)


def _conversation(instructions: str, user: str, output: str) -> Conversation:
    return Conversation(instructions=instructions or None, items=[
        Message(role="user", text=user),
        ToolCall(call_id="c1", name="run", arguments="{}"),
        ToolOutput(call_id="c1", output=output, name="run"),
        Message(role="user", text=user),
    ])


@pytest.mark.parametrize("name", ["qwen_format", "harmony_format", "glm_format", "qwen36_format"])
@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(instructions=_text, user=_text, output=_text)
def test_bound_never_exceeds_the_render(request, name, instructions, user, output):
    chat_format = request.getfixturevalue(name)
    conversation = _conversation(instructions, user, output)
    assert min_prompt_tokens(conversation, chat_format.max_token_bytes) <= len(chat_format.render(conversation))


def test_longest_tokens(qwen_format, harmony_format, o200k_dir):
    vocab = (o200k_dir / "o200k_base.tiktoken").read_text().split("\n")
    assert O200K_MAX_TOKEN_BYTES == max(len(base64.b64decode(line.split()[0])) for line in vocab if line)
    assert harmony_format.max_token_bytes == O200K_MAX_TOKEN_BYTES
    assert qwen_format.max_token_bytes == 128  # Qwen3's longest: 128 spaces


def test_too_long_reads_lengths_and_strips_only_when_close(qwen_format):
    big = Conversation(items=[Message(role="user", text="x" * 128 * 1000)])
    assert too_long(big, 128, 999) == 1000
    assert too_long(big, 128, 1000) is None
    padded = Conversation(items=[Message(role="user", text=" " * 128 * 10 + "x" * 128 * 1000)])
    assert too_long(padded, 128, 1000) is None  # 1010 before stripping, 1000 after
    assistant = Conversation(items=[Message(role="assistant", text="x" * 128 * 1000)])
    assert too_long(assistant, 128, 10) is None  # templates may rewrite assistant text: not counted
