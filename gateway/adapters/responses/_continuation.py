"""`previous_response_id` and `conversation`: a request continuing earlier state.

Shared by the HTTP endpoint and WebSocket mode. A continuation sends only new items: they
are appended to the earlier response's history, whose instructions, tools, tool choice
and reasoning effort carry over unless the request sets them again. A request in a
conversation (/v1/conversations) appends its items to the conversation's; only the items
are the conversation's, the rest is the request's own. Both are pure: the exchange looked up
what the body continues (gateway/pipeline/exchange.py `prepare_built`).
"""

from __future__ import annotations

from typing import Any

from gateway.adapters.responses import _mcp_tools as mcp_tools
from gateway.adapters.responses import conversation_items
from gateway.adapters.responses.input import ResponsesRequest, parse_request
from gateway.core.conversation import Conversation, ToolCall
from gateway.pipeline.request import InConversation
from gateway.store.conversations import StoredConversation
from gateway.store.responses import CachedResponse

__all__ = ["parse_continuation", "parse_in_conversation"]


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
    parsed.listed = {**mcp_tools.listed_as_tools(history.tools), **parsed.listed}  # the chain's MCP listings
    return parsed


def parse_in_conversation(body: dict[str, Any], stored: StoredConversation) -> tuple[ResponsesRequest, InConversation]:
    """A request with `conversation` (`stored`, as the exchange found it): its new items appended
    to the conversation's history, whose exact tokens it continues (instructions and tools are the
    request's own, as OpenAI's conversations keep items only)."""
    conversation_id = stored.conversation_id
    history = stored.history
    calls = {item.call_id: item.name for item in history if isinstance(item, ToolCall)}
    instructions = body.get("instructions")
    # Leading developer messages are items of the conversation, not the instructions (each turn's the same).
    parsed = parse_request({**body, "instructions": instructions if instructions is not None else ""}, calls)
    parsed.conversation.instructions = instructions
    raw_input = body["input"]
    kept = conversation_items.kept([{"role": "user", "content": raw_input}] if isinstance(raw_input, str)
                                   else raw_input)
    parsed.conversation.items = [*history, *parsed.conversation.items]
    parsed.echo["conversation"] = {"id": conversation_id}
    parsed.listed = {**conversation_items.listed_in(stored.items), **parsed.listed}
    parsed.echo["instructions"] = instructions
    return parsed, InConversation(conversation_id, stored.version, stored.tokens, len(history), kept)
