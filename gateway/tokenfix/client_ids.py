"""Checking ids a client sends for the history they claim to cover (NeMo-RL's convention).

A client may attach `prompt_token_ids` + `generation_token_ids` to an assistant message:
the exact ids of the call that produced it. The gateway's own cached tokens are known to
belong to their history (a digest of its items); the client's are only its word. Spliced
unchecked, ids from another history (an earlier message edited afterwards, the system
message dropped on either side, the content of the message changed) would be mixed into a
prompt silently. So before they are used:

1. the prompt ids hold as many turn terminators as the template's render of the history
   before that message (one turn more or less is a dropped or added message);
2. turn by turn, the prompt ids decode to the template's text, except for the model's own
   turns (the template may re-render them differently; the model's exact ids are the point);
   not for formats whose turns end on the token that opens the next message (GLM's), where
   a turn's text does not start with its role;
3. the generation parses back to the message: its text and its tool calls (name and
   arguments); its reasoning too, when the message carries one.

`mismatch` answers why the ids do not fit, or None. It renders the history once, so the
caller runs it off the event loop.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence

from gateway.core.conversation import Conversation, Item, Message, Reasoning, ToolCall
from gateway.formats.base import ChatFormat, parse_output
from gateway.tokenfix._terminators import count_terminators
from gateway.tokenfix.state import TokenState

__all__ = ["mismatch"]


def mismatch(chat_format: ChatFormat, conversation: Conversation, state: TokenState) -> str | None:
    """Why the client's ids in `state` do not cover `conversation`'s first `state.items`
    items, or None when they do."""
    prompt, generated = state.tokens[:state.prompt_len].tolist(), state.tokens[state.prompt_len:].tolist()
    if not prompt or not generated:
        return "'prompt_token_ids' and 'generation_token_ids' must both hold ids"
    terminators = chat_format.turn_terminators
    before = dataclasses.replace(conversation, items=conversation.items[:state.prompt_items])
    template = chat_format.render(before)
    want, got = count_terminators(template, terminators), count_terminators(prompt, terminators)
    if want != got:
        return (f"'prompt_token_ids' hold {got} turns but the history before that assistant message renders "
                f"{want} (a message was added or dropped since the ids were produced)")
    if chat_format.turn_openers:
        return _generation_mismatch(chat_format, conversation, state, generated)  # see below
    header = _assistant_header(chat_format)
    for index, (ours, theirs) in enumerate(zip(_turns(template, terminators), _turns(prompt, terminators),
                                               strict=True)):
        text = chat_format.decode(ours)
        if header and text.lstrip().startswith(header):
            continue  # the model's own turn: its exact ids may differ from the template's
        if chat_format.decode(theirs) != text:
            return (f"'prompt_token_ids' differ from the history at turn {index} (the history was edited "
                    f"since the ids were produced)")
    return _generation_mismatch(chat_format, conversation, state, generated)


def _turns(ids: Sequence[int], terminators: frozenset[int]) -> list[Sequence[int]]:
    """`ids` cut after each terminator (the last piece is the generation prompt)."""
    pieces, start = [], 0
    for index, token in enumerate(ids):
        if token in terminators:
            pieces.append(ids[start:index + 1])
            start = index + 1
    pieces.append(ids[start:])
    return pieces


@functools.cache
def _assistant_header(chat_format: ChatFormat) -> str:
    """The text that opens an assistant turn (`<|im_start|>assistant`): the generation
    prompt's first line."""
    ids = chat_format.render(Conversation(items=[Message(role="user", text="a")]))
    last = max((i for i, t in enumerate(ids) if t in chat_format.turn_terminators), default=-1)
    return chat_format.decode(ids[last + 1:]).strip().split("\n", 1)[0]


def _generation_mismatch(chat_format: ChatFormat, conversation: Conversation, state: TokenState,
                         generated: list[int]) -> str | None:
    parsed = parse_output(chat_format, generated, conversation.tools, conversation.thinking)
    message = conversation.items[state.prompt_items:state.items]
    if _text(parsed, Message) != _text(message, Message):
        return "'generation_token_ids' do not decode to that assistant message's content"
    if _calls(parsed) != _calls(message):
        return "'generation_token_ids' do not decode to that assistant message's tool calls"
    if any(isinstance(item, Reasoning) for item in message) and _text(parsed, Reasoning) != _text(message, Reasoning):
        return "'generation_token_ids' do not decode to that assistant message's reasoning"
    return None


def _text(items: Sequence[Item], kind: type[Message | Reasoning]) -> str:
    return "".join(item.text for item in items if isinstance(item, kind)).strip()


def _calls(items: Sequence[Item]) -> list[tuple[str, object]]:
    return [(item.name, _arguments(item.arguments)) for item in items if isinstance(item, ToolCall)]


def _arguments(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text.strip()
