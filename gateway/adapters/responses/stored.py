"""Stored responses as the Responses API shows them: the Response object, and its input
items as a paginated list (GET /v1/responses/{id}/input_items).

Input items are the conversation the response continued, as the gateway holds it (canonical
items: messages, reasoning, tool calls and outputs), with ids derived from the response's
id and the item's position, so they are stable between calls and usable as `after` cursors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.adapters.validation import expect_range, invalid_request
from gateway.core.conversation import Item, Message, Reasoning, ToolCall, ToolOutput

__all__ = ["input_items_page", "page"]


def input_items_page(response_id: str, items: list[Item], query: Mapping[str, str]) -> dict[str, Any]:
    """One page of a stored response's input items (`page`'s query)."""
    return page([_shown(response_id, i, item) for i, item in enumerate(items)], query, f"response '{response_id}'")


def page(shown: list[dict[str, Any]], query: Mapping[str, str], owner: str) -> dict[str, Any]:
    """One page of `shown` (items with ids, oldest first), as OpenAI's lists: `limit` (1–100,
    default 20), `order` (desc by default, as OpenAI's), `after` an item id of `owner`'s."""
    limit = _int(query.get("limit"), "limit", 20)
    expect_range(limit, "limit", 1, 100)
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid_request("'order' must be 'asc' or 'desc'.", param="order")
    if order == "desc":
        shown = shown[::-1]
    after = query.get("after")
    if after is not None:
        ids = [item["id"] for item in shown]
        if after not in ids:
            raise invalid_request(f"No item '{after}' in {owner}.", param="after")
        shown = shown[ids.index(after) + 1:]
    items = shown[:limit]
    return {"object": "list", "data": items, "first_id": items[0]["id"] if items else None,
            "last_id": items[-1]["id"] if items else None, "has_more": len(shown) > limit}


def _int(raw: str | None, param: str, default: int) -> int:
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise invalid_request(f"'{param}' must be an integer.", param=param) from None


def _shown(response_id: str, position: int, item: Item) -> dict[str, Any]:
    suffix = f"{response_id.removeprefix('resp_')}_{position}"
    if isinstance(item, Message):
        kind = "output_text" if item.role == "assistant" else "input_text"
        return {"type": "message", "id": f"msg_{suffix}", "role": item.role, "status": "completed",
                "content": [{"type": kind, "text": item.text,
                             **({"annotations": [], "logprobs": []} if kind == "output_text" else {})}]}
    if isinstance(item, Reasoning):
        return {"type": "reasoning", "id": f"rs_{suffix}", "summary": [],
                "content": [{"type": "reasoning_text", "text": item.text}]}
    if isinstance(item, ToolCall):
        return {"type": "function_call", "id": f"fc_{suffix}", "call_id": item.call_id, "name": item.name,
                "arguments": item.arguments, "status": "completed"}
    assert isinstance(item, ToolOutput)
    return {"type": "function_call_output", "id": f"fco_{suffix}", "call_id": item.call_id, "output": item.output,
            "status": "completed"}
