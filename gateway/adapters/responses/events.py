"""Responses API stream events from parsed model output.

One `ResponseWriter` per response. It turns the format parser's item events into the
exact event sequence strict clients expect (OpenAI's Responses streaming events): created →
queued (a background response, until it runs) → in_progress → per item added →
content/argument deltas → done → completed | incomplete | failed,
numbered by `sequence_number`, with item ids stable from `added` to `done` and the
full `output` in the final response. Events are plain dicts, serialized once by orjson.

Calls of Codex's namespaced and custom tools map back onto their wire shapes
(gateway/adapters/_codex_tools.py). Reasoning items always carry `encrypted_content`, the
exact text sealed by gateway/adapters/reasoning_blob.py: whether or not the request's
`include` asked for it, it is what lets a stateless client's echoed history restore the
reasoning exactly, and clients that did not ask ignore the field. The first reasoning item
of a turn also names the turn (its response id), under which the session keeps the turn's
ids once it ends. Every item is done before the next one is added, as OpenAI streams them.

Calls of remote MCP tools (`hosted`, gateway/adapters/responses/_mcp_tools.py) are `mcp_call` items,
done only once the gateway ran them (`mcp_call_done`), or `mcp_approval_request` items, added
whole; the listings and approved calls that precede a response's first generation are
`mcp_item`s.

Shapes follow OpenAI's OpenAPI description (tests/conformance validates every event).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gateway.adapters import reasoning_blob
from gateway.adapters._codex_tools import CustomInputStream, Route, custom_input, routes
from gateway.adapters.responses import _mcp_tools as mcp_tools
from gateway.adapters.responses._mcp_tools import HostedTool
from gateway.core.ids import new_id
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted, ParseEvent
from gateway.upstream.mcp import McpResult

__all__ = ["Event", "ResponseWriter"]

Event = dict[str, Any]

# The reasoning text events: OpenAI's names (which Codex and the openai SDK read), and Open
# Responses' (`--responses-spec open-responses`). The specs' one other difference: Open Responses
# requires `usage` in every response object (null until known), OpenAI's describes no null.
REASONING_EVENTS = {
    "openai": ("response.reasoning_text.delta", "response.reasoning_text.done"),
    "open-responses": ("response.reasoning.delta", "response.reasoning.done"),
}

# OpenAI's ResponseErrorCode values the gateway can mean, and context_length_exceeded (above).
_ERROR_CODES = frozenset({"server_error", "rate_limit_exceeded", "invalid_prompt", "context_length_exceeded"})


class ResponseWriter:
    def __init__(self, *, response_id: str, model: str, echo: dict[str, Any], spec: str = "openai") -> None:
        """`echo` holds request fields repeated in the Response object (tools, instructions …);
        `spec` whose event names to use where the specs differ (REASONING_EVENTS)."""
        self.response_id = response_id
        self.model = model
        self.created_at = int(time.time())
        self.echo = echo
        self.output: list[dict[str, Any]] = []
        self.extra: dict[str, Any] = {}  # e.g. token ids when the client asked for them
        self.failure: tuple[str, str] | None = None  # the gateway's own error code and message, once failed
        self._seq = 0
        self._created = False  # response.created was written (by `queued` or `start`)
        self._reasoning_delta, self._reasoning_done = REASONING_EVENTS[spec]
        self._null_usage = spec == "open-responses"
        self._open: dict[int, dict[str, Any]] = {}  # parser index -> output item being streamed
        self._inputs: dict[int, CustomInputStream] = {}  # parser index -> a custom call's input so far
        self._position: dict[int, int] = {}  # parser index -> output_index
        self._routes = routes(echo.get("tools"))
        self._turn_named = False  # the first reasoning item's blob names the turn
        # Logprob entries of output positions (start, end); set when the request asked for them.
        self.logprobs: Callable[[tuple[int, int]], list[dict[str, Any]]] | None = None
        self._text_logprobs: dict[int, list[dict[str, Any]]] = {}  # parser index -> entries so far
        self.hosted: dict[str, HostedTool] = {}  # tools the gateway runs (MCP), by the name the model calls
        self._running: dict[str, tuple[int, dict[str, Any]]] = {}  # call id -> an mcp_call item not done yet

    # -- lifecycle -----------------------------------------------------------------

    def queued(self) -> list[Event]:
        """A background response accepted to run later: created, then queued (OpenAI's order;
        `start` follows with in_progress once it runs)."""
        self._created = True
        snapshot = self.response("queued")
        return [self._event("response.created", response=snapshot),
                self._event("response.queued", response=snapshot)]

    def start(self) -> list[Event]:
        snapshot = self.response("in_progress")
        created = [] if self._created else [self._event("response.created", response=snapshot)]
        self._created = True
        return [*created, self._event("response.in_progress", response=snapshot)]

    def completed(self, usage: dict[str, Any]) -> Event:
        return self._event("response.completed", response=self.response("completed", usage=usage))

    def incomplete(self, usage: dict[str, Any], reason: str = "max_output_tokens") -> Event:
        response = self.response("incomplete", usage=usage, incomplete_details={"reason": reason})
        return self._event("response.incomplete", response=response)

    def failed(self, code: str, message: str, usage: dict[str, Any] | None = None) -> Event:
        """`code` outside OpenAI's ResponseErrorCode is named in the message, under server_error
        (context_length_exceeded is kept: OpenAI sends it too, and Codex acts on it).
        The gateway's own code and message stay in `failure` (an HTTP JSON answer uses them)."""
        self.failure = (code, message)
        if code not in _ERROR_CODES:
            code, message = "server_error", f"{code}: {message}"
        response = self.response("failed", usage=usage, error={"code": code, "message": message})
        return self._event("response.failed", response=response)

    def response(self, status: str, *, usage: dict[str, Any] | None = None,
                 error: dict[str, Any] | None = None, incomplete_details: dict[str, Any] | None = None) -> dict:
        response = {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": int(time.time()) if status == "completed" else None,
            "status": status,
            "model": self.model,
            "output": [] if status in ("queued", "in_progress") else self.output,
            "error": error,
            "incomplete_details": incomplete_details,
            **self.echo,
            **self.extra,
        }
        if usage is not None or self._null_usage:
            response["usage"] = usage
        return response

    # -- items ---------------------------------------------------------------------

    def on_parse_event(self, event: ParseEvent) -> list[Event]:
        if isinstance(event, ItemDelta):
            return self._delta(event)
        if isinstance(event, ItemStarted):
            return self._started(event)
        return self._done(event)

    def _started(self, event: ItemStarted) -> list[Event]:
        output_index = len(self.output)
        self._position[event.index] = output_index
        if event.kind == "tool_call":
            item = self._call_item(event)
            self._register(event.index, item)
            if item["type"] == "mcp_approval_request":
                return []  # added whole, when its arguments are known
            return [self._event("response.output_item.added", output_index=output_index, item=dict(item))]
        if event.kind == "reasoning":
            item = {"type": "reasoning", "id": new_id("rs"), "summary": []}
            part = {"type": "reasoning_text", "text": ""}
        else:
            item = {"type": "message", "id": new_id("msg"), "role": "assistant", "status": "in_progress",
                    "content": []}
            if event.channel:
                item["phase"] = "commentary" if event.channel == "commentary" else "final_answer"
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        self._register(event.index, item)
        added = self._event("response.output_item.added", output_index=output_index, item=dict(item))
        part_added = self._event("response.content_part.added", output_index=output_index,
                                 item_id=item["id"], content_index=0, part=part)
        return [added, part_added]

    def _call_item(self, event: ItemStarted) -> dict[str, Any]:
        call_id = event.call_id or new_id("call")
        if (hosted := self.hosted.get(event.name or "")) is not None:
            if hosted.approval:
                return mcp_tools.approval_item(call_id, hosted, "")
            return mcp_tools.call_item(call_id, hosted, "", None)
        route = self._routes.get(event.name or "") or Route(event.name or "")
        if route.custom:
            return {"type": "custom_tool_call", "id": new_id("ctc"), "call_id": call_id, "name": route.name,
                    "input": "", "status": "in_progress"}
        item = {"type": "function_call", "id": new_id("fc"), "call_id": call_id, "name": route.name,
                "arguments": "", "status": "in_progress"}
        if route.namespace is not None:
            item["namespace"] = route.namespace
        return item

    def _delta(self, event: ItemDelta) -> list[Event]:
        item = self._open[event.index]
        output_index = self._position[event.index]
        kind = item["type"]
        # A delta per token at engine pace: the event is one dict literal (not `_event`'s kwargs).
        seq = self._seq
        if kind == "message":
            entries = self.logprobs(event.span) if self.logprobs is not None and event.span is not None else []
            if entries:
                self._text_logprobs.setdefault(event.index, []).extend(entries)
            self._seq = seq + 1
            return [{"type": "response.output_text.delta", "output_index": output_index, "item_id": item["id"],
                     "content_index": 0, "delta": event.text, "logprobs": entries, "sequence_number": seq}]
        if kind == "reasoning":
            self._seq = seq + 1
            return [{"type": self._reasoning_delta, "output_index": output_index, "item_id": item["id"],
                     "content_index": 0, "delta": event.text, "sequence_number": seq}]
        if kind == "custom_tool_call":  # the model writes JSON around the input: decoded as it comes
            decoded = self._inputs.setdefault(event.index, CustomInputStream()).feed(event.text)
            return [self._event("response.custom_tool_call_input.delta", output_index=output_index,
                                item_id=item["id"], delta=decoded)] if decoded else []
        if kind == "mcp_approval_request":
            return []  # sent whole once its arguments are known
        if kind == "mcp_call":
            return [self._event("response.mcp_call_arguments.delta", output_index=output_index, item_id=item["id"],
                                delta=event.text)]
        self._seq = seq + 1
        return [{"type": "response.function_call_arguments.delta", "output_index": output_index,
                 "item_id": item["id"], "delta": event.text, "sequence_number": seq}]

    def _done(self, event: ItemDone) -> list[Event]:
        item = self._open.pop(event.index)
        output_index = self._position[event.index]
        text = event.text
        kind = item["type"]
        if kind == "function_call":
            item["arguments"] = text
            item["status"] = "completed"
            return [self._event("response.function_call_arguments.done", output_index=output_index,
                                item_id=item["id"], name=item["name"], arguments=text),
                    *self._item_done(output_index, item)]
        if kind == "mcp_call":  # done once it ran (`mcp_call_done`)
            item["arguments"] = text
            self._running[item["id"]] = (output_index, item)
            return [self._event("response.mcp_call_arguments.done", output_index=output_index, item_id=item["id"],
                                arguments=text),
                    self._event("response.mcp_call.in_progress", output_index=output_index, item_id=item["id"])]
        if kind == "mcp_approval_request":
            item["arguments"] = text
            return [self._event("response.output_item.added", output_index=output_index, item=dict(item)),
                    *self._item_done(output_index, item)]
        if kind == "custom_tool_call":
            item["input"] = custom_input(text)
            item["status"] = "completed"
            fields = {"output_index": output_index, "item_id": item["id"]}
            streamed = (stream := self._inputs.pop(event.index, None)) is not None and stream.text or ""
            rest = item["input"][len(streamed):] if item["input"].startswith(streamed) else ""
            events = [self._event("response.custom_tool_call_input.delta", **fields, delta=rest)] if rest else []
            return [*events, self._event("response.custom_tool_call_input.done", **fields, input=item["input"]),
                    *self._item_done(output_index, item)]
        if kind == "reasoning":
            part = {"type": "reasoning_text", "text": text}
            item["content"] = [part]
            item["encrypted_content"] = reasoning_blob.seal(text, turn=None if self._turn_named else self.response_id)
            self._turn_named = True
            events = [self._event(self._reasoning_done, output_index=output_index,
                                  item_id=item["id"], content_index=0, text=text)]
        else:
            entries = self._text_logprobs.pop(event.index, [])
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": entries}
            item["content"] = [part]
            item["status"] = "completed"
            events = [self._event("response.output_text.done", output_index=output_index, item_id=item["id"],
                                  content_index=0, text=text, logprobs=entries)]
        events.append(self._event("response.content_part.done", output_index=output_index, item_id=item["id"],
                                  content_index=0, part=part))
        events.extend(self._item_done(output_index, item))
        return events

    def mcp_call_done(self, item_id: str, outcome: McpResult) -> list[Event]:
        """A streamed `mcp_call` ran: completed or failed, then done."""
        output_index, item = self._running.pop(item_id)
        item.update(output=outcome.output, error=outcome.error.shown if outcome.error else None,
                    status="completed" if outcome.error is None else "failed")
        ended = "response.mcp_call.completed" if outcome.error is None else "response.mcp_call.failed"
        return [self._event(ended, output_index=output_index, item_id=item_id), *self._item_done(output_index, item)]

    def mcp_item(self, item: dict[str, Any]) -> list[Event]:
        """An MCP item known whole before the first generation (a listing, an approved call that
        ran): added, its progress and outcome events, done."""
        output_index = len(self.output)
        self.output.append(item)
        kind = "mcp_list_tools" if item["type"] == "mcp_list_tools" else "mcp_call"
        outcome = "failed" if item.get("error") else "completed"
        added = {**item, "tools": []} if kind == "mcp_list_tools" else {**item, "output": None, "error": None,
                                                                         "status": "in_progress"}
        fields = {"output_index": output_index, "item_id": item["id"]}
        return [self._event("response.output_item.added", output_index=output_index, item=added),
                self._event(f"response.{kind}.in_progress", **fields),
                self._event(f"response.{kind}.{outcome}", **fields), *self._item_done(output_index, item)]

    def whole_item(self, item: dict[str, Any]) -> list[Event]:
        """An item known whole when it is added (a compaction): added, then done."""
        output_index = len(self.output)
        self.output.append(item)
        return [self._event("response.output_item.added", output_index=output_index, item=dict(item)),
                *self._item_done(output_index, item)]

    def _item_done(self, output_index: int, item: dict[str, Any]) -> list[Event]:
        return [self._event("response.output_item.done", output_index=output_index, item=item)]

    def _register(self, index: int, item: dict[str, Any]) -> None:
        self._open[index] = item
        self.output.append(item)

    def event(self, type_: str, **fields: Any) -> Event:
        """An event about the response from outside its stream (a WebSocket steer's answer),
        numbered in its sequence."""
        return self._event(type_, **fields)

    def _event(self, type_: str, **fields: Any) -> Event:
        event = {"type": type_, **fields, "sequence_number": self._seq}
        self._seq += 1
        return event
