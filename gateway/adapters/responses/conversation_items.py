"""The Conversations API's shapes: conversation objects, items, pages, and the `conversation`
parameter of a response.

Items are kept as the API shows them: what the client sent (or the response's output
items), each given an id and a status, a message's string content as one text part. The
model sees their canonical form (`history_of`), parsed as any Responses input is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.adapters.request_schema import InputItem, conversation_ref, validate_items
from gateway.adapters.responses import _mcp_tools as mcp_tools
from gateway.adapters.responses.input import input_items
from gateway.adapters.responses.stored import page
from gateway.core.conversation import Item, ToolCall
from gateway.core.errors import APIError, invalid_request
from gateway.core.ids import new_id
from gateway.upstream.mcp import McpTool

__all__ = ["conversation_id", "conversation_object", "deleted_object", "history_of", "item_in", "items_page", "kept",
           "listed_in", "new_items"]

MAX_NEW_ITEMS = 20  # items one create call may add (OpenAI's bound)
_ID_PREFIXES = {"message": "msg", "reasoning": "rs", "function_call": "fc", "function_call_output": "fco",
                "custom_tool_call": "ctc", "custom_tool_call_output": "ctco", "mcp_list_tools": "mcpl",
                "mcp_call": "mcp", "mcp_approval_request": "mcpr", "mcp_approval_response": "mcpa"}


def conversation_object(conversation_id: str, created_at: int, metadata: dict[str, str]) -> dict[str, Any]:
    return {"id": conversation_id, "object": "conversation", "created_at": created_at, "metadata": metadata}


def deleted_object(conversation_id: str) -> dict[str, Any]:
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


def new_items(raw: Any, param: str, earlier: Sequence[Item], *, at_most: int | None = MAX_NEW_ITEMS
              ) -> tuple[list[dict[str, Any]], list[Item]]:
    """Items a client adds, as kept (ids, status, parts) and as the model sees them;
    `earlier`: the conversation's history, whose calls their outputs may answer."""
    found = [] if raw is None else raw
    if at_most is not None and isinstance(found, list) and len(found) > at_most:
        raise invalid_request(f"At most {at_most} items may be added at a time; got {len(found)}.", param=param)
    models = validate_items(found, param)
    return [_kept(item) for item in found], _history(models, param, earlier)


def history_of(items: list[dict[str, Any]]) -> list[Item]:
    """The canonical items of a conversation's `items` (as kept), read back from its store."""
    return _history(validate_items(items, "items"), "items", ())


def listed_in(items: list[dict[str, Any]]) -> dict[str, list[McpTool]]:
    """The MCP listings a conversation's `items` (as kept) hold, by server label."""
    listings = [item for item in items if item["type"] == "mcp_list_tools"]
    return mcp_tools.listed_in(validate_items(listings, "items")) if listings else {}


def kept(items: list[Any]) -> list[dict[str, Any]]:
    """Items (already validated as a response's input) as a conversation keeps them."""
    return [_kept(item) for item in items]


def items_page(conversation_id: str, items: list[dict[str, Any]], query: Mapping[str, str]) -> dict[str, Any]:
    return page(items, query, f"conversation '{conversation_id}'")


def item_in(conversation_id: str, items: list[dict[str, Any]], item_id: str) -> dict[str, Any]:
    found = next((item for item in items if item["id"] == item_id), None)
    if found is None:
        raise APIError(f"Item with id '{item_id}' not found in conversation '{conversation_id}'.", status=404,
                       param="item_id", code="item_not_found")
    return found


def conversation_id(body: dict[str, Any]) -> str | None:
    """The `conversation` a response runs in (its id, or `{"id": …}`); OpenAI's 400 with
    `previous_response_id`."""
    raw = body.get("conversation")
    if raw is None:
        return None
    if body.get("previous_response_id") is not None:
        raise invalid_request("Mutually exclusive parameters: Ensure you are only providing one of: "
                              "'previous_response_id' or 'conversation'.", param=None,
                              code="mutually_exclusive_parameters")
    return conversation_ref(raw)


def _kept(item: dict[str, Any]) -> dict[str, Any]:
    kind = item.get("type", "message")
    kept = {"type": kind, **item}
    kept.setdefault("id", new_id(_ID_PREFIXES.get(kind, "item")))
    if kind == "message":
        content = kept.get("content")
        if isinstance(content, str):
            part = "output_text" if kept.get("role") == "assistant" else "input_text"
            kept["content"] = [{"type": part, "text": content,
                                **({"annotations": []} if part == "output_text" else {})}]
    if kind in ("message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output"):
        kept.setdefault("status", "completed")
    return kept


def _history(items: list[InputItem], param: str, earlier: Sequence[Item]) -> list[Item]:
    """The canonical form of validated `items`, after the history `earlier`."""
    if not items:
        return []
    calls = {item.call_id: item.name for item in earlier if isinstance(item, ToolCall)}
    return input_items(items, calls, [], param)
