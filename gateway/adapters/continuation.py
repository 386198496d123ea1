"""`previous_response_id`: earlier responses with their exact tokens, and continuing them.

Shared by the HTTP endpoint (the `store: true` response store) and WebSocket mode (the
per-connection cache in gateway/ws/cache.py). A continuation sends only new items: they
are appended to the earlier response's history, whose instructions, tools, tool choice
and reasoning effort carry over unless the request sets them again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from gateway.adapters.responses_input import ResponsesRequest, parse_request
from gateway.core.conversation import Conversation, ToolCall
from gateway.tokenfix.state import TokenState


@dataclass(slots=True)
class CachedResponse:
    response_id: str
    conversation: Conversation  # the whole history, the response's own output items included
    tokens: TokenState | None  # exact prompt + generated ids; None after a warmup (nothing generated)


class ResponseStore:
    """Responses created with `store: true`, continuable by `previous_response_id` from any
    connection or over HTTP. In memory, least recently used first out past `max_entries`."""

    def __init__(self, max_entries: int = 1024) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, CachedResponse] = OrderedDict()

    def get(self, response_id: str) -> CachedResponse | None:
        entry = self._entries.get(response_id)
        if entry is not None:
            self._entries.move_to_end(response_id)
        return entry

    def put(self, entry: CachedResponse) -> None:
        self._entries[entry.response_id] = entry
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


def parse_continuation(body: dict[str, Any], previous: CachedResponse | None) -> ResponsesRequest:
    """`parse_request`, with the new items appended to `previous`'s history when there is one."""
    if previous is None:
        return parse_request(body)
    history = previous.conversation
    calls = {item.call_id: item.name for item in history.items if isinstance(item, ToolCall)}
    instructions = body.get("instructions")
    # Leading developer messages of a continuation are new items, not the instructions.
    parsed = parse_request({**body, "instructions": instructions if instructions is not None else ""}, calls)
    new = parsed.conversation
    parsed.conversation = Conversation(
        items=[*history.items, *new.items],
        instructions=new.instructions if instructions is not None else history.instructions,
        tools=new.tools if "tools" in body or new.tool_choice == "none" else history.tools,
        tool_choice=new.tool_choice if "tool_choice" in body else history.tool_choice,
        reasoning_effort=new.reasoning_effort if "reasoning" in body else history.reasoning_effort,
    )
    parsed.echo["instructions"] = instructions
    return parsed
