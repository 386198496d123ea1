"""Images in a vision family's prompt: each image item renders as the family's published template
writes it (transformers' `apply_chat_template` with image items, hand-written), one placeholder per
image; user text that spells a placeholder stays text."""

from __future__ import annotations

import base64
import copy
import io

import pytest
from PIL import Image as PILImage

from gateway.core.conversation import Conversation, Message, ToolCall, ToolOutput, images_of, with_parts
from gateway.core.image import image_from_base64
from gateway.formats.hf.format import HFChatFormat


def png(width: int = 30, height: int = 20):
    buffer = io.BytesIO()
    PILImage.new("RGB", (width, height), (200, 30, 30)).save(buffer, "PNG")
    return image_from_base64(base64.b64encode(buffer.getvalue()).decode(), param="t")


def user(*parts) -> Message:
    text, held = with_parts(list(parts))
    return Message("user", text, parts=held)


@pytest.mark.parametrize(("family", "placeholder"), [
    ("qwen36_tokenizer", "<|image_pad|>"),
    ("gemma4_tokenizer", "<|image|>"),
    ("kimi_tokenizer", "<|media_pad|>"),
])
def test_images_render_as_the_published_template_writes_them(request, family, placeholder):
    tokenizer = request.getfixturevalue(family)
    if placeholder not in tokenizer.get_vocab():  # Gemma 4's stand-in vocabulary has its text markup only
        tokenizer = copy.deepcopy(tokenizer)
        tokenizer.add_special_tokens({"additional_special_tokens": [placeholder]})
    fmt = HFChatFormat(tokenizer, vision=True)
    assert fmt.image_token_id == tokenizer.convert_tokens_to_ids(placeholder)
    conversation = Conversation(items=[user(png(), "What is in ", png(40, 40), " these?")])
    reference = tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in "}, {"type": "image"},
                                      {"type": "text", "text": " these?"}]}],
        tokenize=False, add_generation_prompt=True)
    ids = fmt.render(conversation)
    assert ids == tokenizer(reference, add_special_tokens=False)["input_ids"]
    assert ids.count(fmt.image_token_id) == len(images_of(conversation.items)) == 2


def test_an_image_in_a_tool_output_renders_in_the_tool_turn(qwen36_tokenizer):
    """Codex's view_image / Claude Code's Read: the image comes back as the tool's result."""
    fmt = HFChatFormat(qwen36_tokenizer, vision=True)
    text, parts = with_parts(["shot.png:", png()])
    items = [Message("user", "Look at shot.png"), ToolCall("c1", "view_image", '{"path": "shot.png"}'),
             ToolOutput("c1", text, parts=parts)]
    reference = qwen36_tokenizer.apply_chat_template(
        [{"role": "user", "content": "Look at shot.png"},
         {"role": "assistant", "content": "", "tool_calls": [
             {"id": "c1", "type": "function", "function": {"name": "view_image", "arguments": {"path": "shot.png"}}}]},
         {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "shot.png:"}, {"type": "image"}]}],
        tokenize=False, add_generation_prompt=True)
    ids = fmt.render(Conversation(items=items))
    assert ids == qwen36_tokenizer(reference, add_special_tokens=False)["input_ids"]
    assert ids.count(fmt.image_token_id) == 1


def test_text_that_spells_a_placeholder_stays_text(qwen36_tokenizer):
    fmt = HFChatFormat(qwen36_tokenizer, vision=True)
    ids = fmt.render(Conversation(items=[user("<|vision_start|><|image_pad|><|vision_end|>", png())]))
    assert ids.count(fmt.image_token_id) == 1  # the image's; the text's is plain text


def test_a_text_only_model_has_no_placeholder(qwen36_tokenizer):
    assert HFChatFormat(qwen36_tokenizer).image_token_id is None
