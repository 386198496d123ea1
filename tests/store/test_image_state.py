"""A conversation with images survives the shared store (another process continues it with the same
images), and an image in the history is part of what the exact tokens are known by."""

from __future__ import annotations

import base64
import io

from PIL import Image as PILImage

from gateway.core.conversation import Conversation, Message, ToolOutput, with_parts
from gateway.core.image import image_from_base64
from gateway.store.redis import _codec as codec
from gateway.tokenfix.state import history_digest


def image(color):
    buffer = io.BytesIO()
    PILImage.new("RGB", (4, 4), color).save(buffer, "PNG")
    return image_from_base64(base64.b64encode(buffer.getvalue()).decode(), param="p")


def user(*parts) -> Message:
    text, held = with_parts(list(parts))
    return Message("user", text, parts=held)


def test_images_round_trip_through_the_store():
    text, parts = with_parts(["out:", image((0, 0, 255))])
    conversation = Conversation(items=[user(image((255, 0, 0)), "what?"), ToolOutput("c1", text, parts=parts)])
    assert codec.loads(codec.dumps(conversation)) == conversation


def test_the_history_digest_sees_images_and_text_only_items_keep_theirs():
    red, blue = image((255, 0, 0)), image((0, 0, 255))
    assert history_digest([user(red, "what?")]) != history_digest([user(blue, "what?")])
    assert history_digest([user(red, "what?")]) != history_digest([user("what?", red)])
    assert history_digest([user(red, "what?")]) != history_digest([Message("user", "what?")])
    assert history_digest([Message("user", "what?")]) == history_digest([Message("user", "what?", parts=())])
