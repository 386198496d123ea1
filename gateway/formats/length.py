"""A lower bound on a prompt's length in tokens, from its text's length, without tokenizing.

A body that cannot fit the context must be refused before it is rendered: rendering and
tokenizing a 20 MB message costs ~1.5 GB of memory and seconds of CPU, only to learn what the
text's length already told. The bound:

- A token stands for at most `max_token_bytes` bytes of text (the tokenizer's longest token;
  `ChatFormat.max_token_bytes`), so any text of `n` bytes encodes to at least
  `ceil(n / max_token_bytes)` tokens, however the encoder splits it, and a prompt holding
  several texts, side by side, to at least their sum.
- A Python string of `n` characters is at least `n` UTF-8 bytes.
- Every format renders the client's own text verbatim (at most trimmed of surrounding
  whitespace): instructions, user/system/developer messages and tool outputs. Assistant text,
  reasoning and tool-call arguments are left out of the count, as templates may drop or rewrite
  them (earlier reasoning is dropped, arguments re-serialised); spliced prompts carry the
  same texts as their exact earlier tokens, which the splice checked render identically.

So `min_prompt_tokens` never exceeds the real prompt's length: a request it refuses could not
have fit. `too_long` is O(items), reading only `len()` of strings, unless it is close.
"""

from __future__ import annotations

from gateway.core.conversation import Conversation, Message, ToolOutput

__all__ = ["too_long"]


def min_prompt_tokens(conversation: Conversation, max_token_bytes: int) -> int:
    """At least this many tokens in any render of `conversation`."""
    return -(-sum(len(text.strip()) for text in _verbatim_texts(conversation)) // max_token_bytes)


def too_long(conversation: Conversation, max_token_bytes: int, limit: int) -> int | None:
    """`min_prompt_tokens` when it exceeds `limit`, else None; strips (copies) texts only when
    their unstripped lengths alone exceed it. One pass of `len()`s: ~0.1 µs an item."""
    chars = len(conversation.instructions or "")
    for item in conversation.items:
        kind = type(item)
        if kind is Message:
            if item.role != "assistant":
                chars += len(item.text)
        elif kind is ToolOutput:
            chars += len(item.output)
    if -(-chars // max_token_bytes) <= limit:
        return None
    bound = min_prompt_tokens(conversation, max_token_bytes)
    return bound if bound > limit else None


def _verbatim_texts(conversation: Conversation) -> list[str]:
    texts = [conversation.instructions] if conversation.instructions else []
    for item in conversation.items:  # the same texts as too_long's pass (exact types: slots dataclasses)
        if isinstance(item, Message):
            if item.role != "assistant":
                texts.append(item.text)
        elif isinstance(item, ToolOutput):
            texts.append(item.output)
    return texts
