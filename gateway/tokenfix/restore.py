"""Exact tokens of earlier turns from ids the client sent back, for a history no cache holds.

A stateless client (Codex over HTTP) sends the whole history each time; a gateway that has
no cached tokens for it (restarted, evicted, another replica) would re-tokenize the model's
earlier output. When the client echoes the ids the model generated in a turn (sealed in a
reasoning item's `encrypted_content`, gateway/adapters/reasoning_blob.py), the tokens of
that turn are rebuilt as they were: the prompt it had (the history before it, rendered and
spliced onto the turn before, as the live session did) and then the generated ids. Each such
turn extends the previous one's `TokenState`, starting from the session's cached state when
the history continues it; the last state is the prefix the new prompt is spliced onto, as
with the session cache or a client's `prompt_token_ids` + `generation_token_ids`.

Ids are used only when they parse back to exactly the items the history shows for that
turn; otherwise the turn is re-rendered from its items (and the mismatch logged).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence

from gateway.core.conversation import Conversation, Item, Message, Reasoning, ToolCall
from gateway.formats.base import ChatFormat, parse_output
from gateway.tokenfix.prompt import build_prompt
from gateway.tokenfix.state import TokenState

__all__ = ["Generated", "restore", "uncovered"]

log = logging.getLogger(__name__)

# (the reasoning item that carried them, the ids the model generated in that item's turn,
# or the response id of that turn, under which the session store keeps them)
Generated = tuple[Reasoning, Sequence[int] | str]


def uncovered(conversation: Conversation, generated: Sequence[Generated], prefix: TokenState | None
              ) -> list[tuple[int, Sequence[int] | str]]:
    """(index in the history, ids) of the generated turns past what `prefix` covers (by count:
    whether the history continues it is checked later). Cheap: with a warm session cache
    this is all a request pays."""
    if not generated:
        return []
    wanted = {id(item): ids for item, ids in generated}
    covered = prefix.items if prefix is not None else 0
    return [(i, wanted[id(item)]) for i, item in enumerate(conversation.items[covered:], covered) if id(item) in wanted]


def restore(chat_format: ChatFormat, conversation: Conversation, turns: Sequence[tuple[int, Sequence[int]]],
            prefix: TokenState | None) -> TokenState | None:
    """`prefix` extended by the exact tokens of `turns` (from `uncovered`), in history order."""
    terminators = chat_format.turn_terminators
    state = prefix if prefix is not None and prefix.continued_by(conversation, terminators) else None
    items = conversation.items
    for index, ids in turns:
        span = _turn_span(chat_format, conversation, index, ids)
        if span is None:
            log.warning("ignoring the generated ids sealed with input item %d: they do not decode to the items "
                        "the history holds for that turn; it is rendered from its items", index)
            continue
        start, end = span
        head = dataclasses.replace(conversation, items=items[:start])
        state = TokenState.build(conversation, items[:end], _prompt(chat_format, head, state), ids, terminators,
                                 prompt_items=start)
    return state if state is not None else prefix


def _turn_span(chat_format: ChatFormat, conversation: Conversation, index: int, ids: Sequence[int]
               ) -> tuple[int, int] | None:
    """Where the turn whose reasoning item is `items[index]` lies in the history, if `ids`
    parse to exactly its items (the first reasoning item of the parse being that one)."""
    items = conversation.items
    parsed = parse_output(chat_format, ids, conversation.tools, conversation.thinking)
    first = next((i for i, item in enumerate(parsed) if isinstance(item, Reasoning)), None)
    if first is None or index < first:
        return None
    start = index - first
    turn = items[start:start + len(parsed)]
    if len(turn) != len(parsed) or not all(map(_same, turn, parsed)):
        return None
    return start, start + len(parsed)


def _same(held: Item, parsed: Item) -> bool:
    """The history's item is the parsed one; call ids are the client's, and a tool call's
    arguments may come back re-serialized (Codex's custom tools): equal as JSON is enough."""
    if isinstance(held, ToolCall) and isinstance(parsed, ToolCall):
        if held.name != parsed.name:
            return False
        if held.arguments == parsed.arguments:
            return True
        arguments = _json(parsed.arguments)
        return arguments is not None and _json(held.arguments) == arguments
    if isinstance(held, Message) and isinstance(parsed, Message):
        return (held.role, held.text, held.channel) == (parsed.role, parsed.text, parsed.channel)
    return isinstance(held, Reasoning) and isinstance(parsed, Reasoning) and held.text == parsed.text


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _prompt(chat_format: ChatFormat, head: Conversation, state: TokenState | None) -> Sequence[int]:
    """The prompt of the turn after `head`, made as the live turn's was (Qwen3 drops earlier
    reasoning once a new user query comes: then it is the template's render)."""
    return build_prompt(chat_format, head, state).ids
