"""Rendering a `Conversation` through a HF chat template without letting content forge markup.

A chat template writes its markup (`<|im_start|>`, `<tool_call>`, …) as text, and a plain
`tokenizer(text)` would turn the same strings inside user, tool or assistant content into
the same token ids. So before rendering, every added-token string inside content is swapped
for a private-use escape; after rendering, the added tokens left in the text are exactly the
template's own. The text is split at those, the escapes are swapped back, and each piece is
encoded with a copy of the tokenizer that has no added tokens at all.

For content without added-token strings (nearly always) nothing is swapped, and the ids
equal `apply_chat_template(..., tokenize=True)`: HF tokenizers also split at added tokens
first and encode each piece on its own. Because only the offending substrings change, the
template's string operations (strip, trim, startswith) see the content they would see anyway.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import orjson
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from gateway.core.conversation import Conversation, Message, Reasoning, ToolCall, ToolOutput
from gateway.core.image import Image

__all__ = ["SafeTemplateEncoder", "hf_messages"]

log = logging.getLogger(__name__)

# Escapes are ESCAPE_OPEN + index + ESCAPE_CLOSE, from the Supplementary Private Use Area-B.
# The two marker characters are themselves escaped, so content can never fake an escape.
ESCAPE_OPEN = "\U00100000"
ESCAPE_CLOSE = "\U00100001"


def hf_messages(conversation: Conversation) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The conversation as OpenAI-style chat messages and tools, the shape HF templates read.

    Developer text becomes a system message (templates have no developer role). One model
    turn — reasoning, text and tool calls in a row — becomes one assistant message.
    """
    messages: list[dict[str, Any]] = []
    if conversation.instructions:
        messages.append({"role": "system", "content": conversation.instructions})
    turn: dict[str, Any] | None = None  # the assistant message of the current model turn
    for item in conversation.items:
        if isinstance(item, Reasoning):
            if turn is None or turn["content"] or turn["tool_calls"] or "reasoning_content" in turn:
                turn = _assistant(messages)
            turn["reasoning_content"] = item.text
        elif isinstance(item, Message) and item.role == "assistant":
            if turn is None or turn["content"] or turn["tool_calls"]:
                turn = _assistant(messages)
            turn["content"] = item.text
        elif isinstance(item, ToolCall):
            if turn is None:
                turn = _assistant(messages)
            function = {"name": item.name, "arguments": item.arguments}
            turn["tool_calls"].append({"id": item.call_id, "type": "function", "function": function})
        else:
            turn = None
            if isinstance(item, ToolOutput):
                message = {"role": "tool", "content": _content(item.parts) if item.parts else item.output,
                           "tool_call_id": item.call_id}
                if item.name:
                    message["name"] = item.name
                messages.append(message)
            else:
                role = "system" if item.role == "developer" else item.role
                messages.append({"role": role, "content": _content(item.parts) if item.parts else item.text})
    for message in messages:
        if message.get("tool_calls") == []:
            del message["tool_calls"]
    tools = [
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
        }
        for tool in conversation.tools
    ]
    return messages, tools


def _content(parts: tuple[str | Image, ...]) -> list[dict[str, Any]]:
    """Content with images as templates read it: `{"type": "image"}` items (each template writes its
    placeholder for one) between `{"type": "text"}` items."""
    return [{"type": "text", "text": part} if isinstance(part, str) else {"type": "image"} for part in parts]


def _assistant(messages: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": []}
    messages.append(message)
    return message


class SafeTemplateEncoder:
    """Renders chat messages with the tokenizer's template into ids, content kept as plain text."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, template_kwargs: dict[str, Any], *,
                 prepare: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None) -> None:
        self._tokenizer = tokenizer
        self._template_kwargs = template_kwargs
        self._prepare = prepare  # the family's reshaping of `hf_messages` for its template
        self._markup_ids = {token.content: token_id for token_id, token in tokenizer.added_tokens_decoder.items()}
        longest_first = sorted(self._markup_ids, key=len, reverse=True)
        self._markup = re.compile("(" + ("|".join(map(re.escape, longest_first)) or "(?!)") + ")")
        self._escapable = longest_first + [ESCAPE_OPEN, ESCAPE_CLOSE]
        self._escape_index = {text: i for i, text in enumerate(self._escapable)}
        self._needs_escape = re.compile("|".join(map(re.escape, self._escapable)))
        self._escape = re.compile(f"{ESCAPE_OPEN}([0-9]+){ESCAPE_CLOSE}")
        self._json_verbatim = all(orjson.dumps(text).decode() == f'"{text}"' for text in self._escapable)
        self._plain = _without_added_tokens(tokenizer.backend_tokenizer)

    def encode(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        text, escaped = self.render_text(messages, tools)
        if escaped and log.isEnabledFor(logging.DEBUG):
            self._check_branching(messages, tools or None, text)
        return self.ids(text)

    def render_text(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> tuple[str, bool]:
        """The template's text, content escaped; and whether any content needed escaping."""
        if self._prepare is not None:
            messages = self._prepare(messages)
        escaped = False

        def escape(value: Any) -> Any:
            nonlocal escaped
            if self._clean(value):
                return value
            if isinstance(value, str):
                if self._needs_escape.search(value) is None:
                    return value
                escaped = True
                return self._needs_escape.sub(lambda m: f"{ESCAPE_OPEN}{self._escape_index[m[0]]}{ESCAPE_CLOSE}", value)
            if isinstance(value, dict):
                return {key: escape(item) for key, item in value.items()}
            if isinstance(value, list):
                return [escape(item) for item in value]
            return value

        return self._render(escape(messages), escape(tools) or None), escaped

    def ids(self, text: str) -> list[int]:
        """Ids of `render_text`'s text (or any part of it that starts at markup or at its start)."""
        parts = self._markup.split(text)  # [text, markup, text, markup, …, text]
        pieces = [self._unescape(piece) for piece in parts[0::2]]
        ids: list[int] = []
        for i, encoding in enumerate(self._plain.encode_batch_fast(pieces, add_special_tokens=False)):
            ids.extend(encoding.ids)
            if 2 * i + 1 < len(parts):
                ids.append(self._markup_ids[parts[2 * i + 1]])
        return ids

    def _clean(self, value: Any) -> bool:
        """No string in `value` needs escaping: one search over its JSON text instead of a
        walk over every string (tool schemas are big trees), when JSON spells each escapable
        string as is."""
        if not self._json_verbatim or isinstance(value, str):
            return False
        try:
            return self._needs_escape.search(orjson.dumps(value, default=str).decode()) is None
        except orjson.JSONEncodeError:  # lone surrogates, huge ints: walk it
            return False

    def _render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        return self._tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=True, **self._template_kwargs
        )

    def _unescape(self, text: str) -> str:
        if ESCAPE_OPEN not in text:
            return text
        return self._escape.sub(lambda m: self._escapable[int(m[1])], text)

    def _check_branching(self, messages, tools, text: str) -> None:
        # The template saw escapes where the content has markup strings; a template that
        # branches on content ("does this user text start with <tool_response>?") renders
        # differently then. The escaped rendering is the one kept: content stays content.
        if self._prepare is not None:
            messages = self._prepare(messages)
        if self._unescape(text) != self._render(messages, tools):
            log.debug("chat template rendered markup-bearing content differently; kept it as plain text")


def _without_added_tokens(backend: Tokenizer) -> Tokenizer:
    """A tokenizer sharing the normalizer, pre-tokenizer and model, without the added tokens."""
    plain = Tokenizer(backend.model)  # shares the model with `backend`: no copy of the vocabulary
    if backend.normalizer is not None:
        plain.normalizer = backend.normalizer
    if backend.pre_tokenizer is not None:
        plain.pre_tokenizer = backend.pre_tokenizer
    return plain
