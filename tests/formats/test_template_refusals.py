"""A chat template that refuses a conversation (Qwen3.6's "No user query found in messages.") is the
client's 400, in the API's shape, not a crash of the turn."""

from __future__ import annotations

import pytest

from gateway.core.conversation import Conversation, Message
from gateway.core.errors import APIError


def test_a_template_refusal_is_a_400(qwen36_format):
    with pytest.raises(APIError) as refused:
        qwen36_format.render(Conversation(items=[Message("developer", "Be brief.")], instructions="You are terse."))
    assert (refused.value.status, refused.value.code, refused.value.param) == (400, "invalid_prompt", "input")
    assert refused.value.message == ("The model's chat template cannot render this conversation: "
                                     "No user query found in messages.")
