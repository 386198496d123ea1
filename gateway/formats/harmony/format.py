"""The gpt-oss chat format: harmony messages rendered and parsed with openai-harmony."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openai_harmony import HarmonyEncoding, HarmonyEncodingName, load_harmony_encoding

from gateway.core.conversation import Conversation, Tool
from gateway.core.image import Image
from gateway.core.sampling import OutputConstraint
from gateway.formats.base import Covered, Tail
from gateway.formats.harmony import _constraints as constraints
from gateway.formats.harmony._constraints import HarmonyTokens
from gateway.formats.harmony._parser import HarmonyParser
from gateway.formats.harmony._render import HarmonyRenderer

__all__ = ["load_harmony_format"]

# o200k_base's longest token, in bytes (tests/formats/test_length.py reads it off the vocabulary).
O200K_MAX_TOKEN_BYTES = 128


class HarmonyFormat:
    name = "harmony"
    image_token_id: int | None = None  # text only

    def image_tokens(self, image: Image) -> int:
        return 1
    max_token_bytes = O200K_MAX_TOKEN_BYTES

    def __init__(self, encoding: HarmonyEncoding, *, start_date: str | None = None,
                 model_identity: str | None = None) -> None:
        self.encoding = encoding
        self.renderer = HarmonyRenderer(encoding, start_date=start_date, model_identity=model_identity)
        end_of_text = encoding.encode("<|endoftext|>", allowed_special={"<|endoftext|>"})[0]
        # <|return|> ends a final answer, <|call|> a tool call; <|end|> only ends a message.
        self.stop_token_ids = sorted([*encoding.stop_tokens_for_assistant_actions(), end_of_text])
        self.turn_terminators = frozenset(encoding.stop_tokens())  # <|end|> <|return|> <|call|>
        self.turn_openers: frozenset[int] = frozenset()
        self._tokens = HarmonyTokens({name: encoding.encode(name, allowed_special={name})[0] for name in (
            "<|start|>", "<|end|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|return|>", "<|call|>")})

    def render(self, conversation: Conversation) -> list[int]:
        return self.renderer.render(conversation)

    def render_tail(self, conversation: Conversation, covered: Covered) -> Tail | None:
        return self.renderer.render_tail(conversation, covered)

    def parser(self, tools: Sequence[Tool] = (), *, thinking: bool = True) -> HarmonyParser:
        return HarmonyParser(self.encoding)  # harmony calls carry their JSON: no schema needed

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.encoding.decode(token_ids)

    def structured_outputs(self, constraint: OutputConstraint, tools: Sequence[Tool], *,
                           thinking: bool = True) -> dict[str, Any]:
        return constraints.structured_outputs(constraint, tools, self._tokens)

    def token_bytes(self, token_id: int) -> bytes:
        """Through openai-harmony's text decode: a token that is part of a UTF-8 sequence
        comes back as U+FFFD (harmony exposes no per-token bytes)."""
        return self.encoding.decode([token_id]).encode()


def load_harmony_format(**options: str | None) -> HarmonyFormat:
    """The gpt-oss format. Options: `start_date` (YYYY-MM-DD; default today), `model_identity`.

    openai-harmony reads o200k_base.tiktoken from $TIKTOKEN_ENCODINGS_BASE (or downloads
    it): offline, point that at a directory holding the file.
    """
    return HarmonyFormat(load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS), **options)
