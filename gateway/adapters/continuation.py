"""`previous_response_id`: a request continuing an earlier response (gateway/sessions/responses.py).

Shared by the HTTP endpoint and WebSocket mode. A continuation sends only new items: they
are appended to the earlier response's history, whose instructions, tools, tool choice
and reasoning effort carry over unless the request sets them again.
"""

from __future__ import annotations

from typing import Any

from gateway.adapters.responses_input import ResponsesRequest, parse_request
from gateway.core.conversation import Conversation, ToolCall
from gateway.sessions.responses import CachedResponse


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
