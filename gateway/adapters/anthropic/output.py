"""Anthropic Messages output: the message object, or its SSE stream (`MessageEvents`, the
exchange's writer), for a turn.

The stream is the sequence the Messages API sends and the `anthropic` SDK's accumulator
checks: `message_start`, `ping`, per content block `content_block_start` → deltas
(`text_delta` | `thinking_delta` + a closing `signature_delta` | `input_json_delta`) →
`content_block_stop`, then `message_delta` (stop reason, final usage) and `message_stop`.
A thinking block's signature seals its exact text (gateway/adapters/reasoning_blob.py);
in a whole message (not streamed) the first one also seals every id the turn generated, so
a gateway with no cache for the session continues it exactly. A streamed thinking block
must be signed before the blocks after it start, so it seals its text only; the session
cache keeps the ids. Parser item indices are content block indices: both count from 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from gateway.adapters import reasoning_blob
from gateway.adapters._generation import CONTEXT_WINDOW, coalesce, incomplete_reason, token_fields
from gateway.adapters.anthropic.input import MessagesRequest
from gateway.core.conversation import Message, Reasoning, ToolCall
from gateway.core.errors import APIError
from gateway.core.push import Hold
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted, ParseEvent
from gateway.pipeline.turn import Turn
from gateway.tokenfix.record import TurnRecord

__all__ = ["MessageEvents", "error_body", "message"]

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
                529: "overloaded_error"}


def error_body(exc: APIError) -> dict[str, Any]:
    """`{"type": "error", "error": {"type", "message"}}`, the type following the HTTP status."""
    kind = _ERROR_TYPES.get(exc.status, "api_error" if exc.status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": exc.message}}


def message(turn: Turn, parsed: MessagesRequest, message_id: str) -> dict[str, Any]:
    record = turn.record
    content: list[dict[str, Any]] = []
    ids = record.output_ids if record.finished else None
    for item in record.output_items:
        if isinstance(item, Reasoning):
            content.append(_thinking(item.text, ids, parsed.show_thinking))
            ids = None
        elif isinstance(item, Message):
            content.append({"type": "text", "text": item.text})
        elif isinstance(item, ToolCall):
            content.append({"type": "tool_use", "id": item.call_id, "name": item.name,
                            "input": _input(item.arguments)})
    body = {"id": message_id, "type": "message", "role": "assistant", "model": parsed.model, "content": content,
            "stop_reason": stop_reason(turn), "stop_sequence": None, "usage": usage(record)}
    return {**body, **token_fields(record)} if parsed.return_token_ids else body


class MessageEvents:
    """A streamed message as the exchange's writer: its SSE events pushed to `sink` (the events
    of each upstream read from the read itself)."""

    keeps = True

    def __init__(self, parsed: MessagesRequest, message_id: str, sink: Callable[[bytes], Hold]) -> None:
        self.parsed = parsed
        self.message_id = message_id
        self.sink = sink
        self._started = False
        self._kinds: dict[int, str] = {}

    def started(self, turn: Turn) -> Hold:
        self._started = True
        start = {"id": self.message_id, "type": "message", "role": "assistant", "model": self.parsed.model,
                 "content": [], "stop_reason": None, "stop_sequence": None,
                 "usage": {"input_tokens": turn.record.input_tokens, "output_tokens": 0,
                           "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}}
        return self.sink(_event("message_start", message=start) + _event("ping"))

    def events(self, events: list[ParseEvent]) -> Hold:
        data = b"".join(self._encode(events))
        return self.sink(data) if data else None

    def _encode(self, events: list[ParseEvent]) -> Iterator[bytes]:
        kinds, show_thinking = self._kinds, self.parsed.show_thinking
        for event in coalesce(events):
            if isinstance(event, ItemStarted):
                kinds[event.index] = event.kind
                yield _event("content_block_start", index=event.index, content_block=_opening(event))
            elif isinstance(event, ItemDelta):
                kind = kinds[event.index]
                if kind == "text":
                    yield _event("content_block_delta", index=event.index,
                                 delta={"type": "text_delta", "text": event.text})
                elif kind == "reasoning":
                    if show_thinking:
                        yield _event("content_block_delta", index=event.index,
                                     delta={"type": "thinking_delta", "thinking": event.text})
                else:
                    yield _event("content_block_delta", index=event.index,
                                 delta={"type": "input_json_delta", "partial_json": event.text})
            elif isinstance(event, ItemDone):
                if kinds[event.index] == "reasoning":
                    yield _event("content_block_delta", index=event.index,
                                 delta={"type": "signature_delta", "signature": reasoning_blob.seal(event.text)})
                yield _event("content_block_stop", index=event.index)

    def answer(self, turn: Turn) -> None:
        return None

    def ended(self, turn: Turn) -> Hold:
        """`message_delta` ends the message's own fields: with `return_token_ids`, its ids and
        weight versions too (beside `usage`), then `message_stop`."""
        ids = token_fields(turn.record) if self.parsed.return_token_ids else {}
        return self.sink(_event("message_delta", delta={"stop_reason": stop_reason(turn), "stop_sequence": None},
                                usage=usage(turn.record), **ids) + _event("message_stop"))

    def failed(self, turn: Turn, error: APIError) -> Hold:
        if not self._started:
            raise error  # nothing went out: an HTTP error, in Anthropic's shape
        return self.sink(_event("error", error=error_body(error)["error"]))


def stop_reason(turn: Turn) -> str:
    """`model_context_window_exceeded` when the context window, not max_tokens, ended it."""
    record = turn.record
    if record.finish_reason == "length":
        return "max_tokens" if incomplete_reason(turn) == "max_output_tokens" else CONTEXT_WINDOW
    if any(isinstance(item, ToolCall) for item in record.output_items):
        return "tool_use"
    return "end_turn"


def usage(record: TurnRecord) -> dict[str, Any]:
    """Anthropic counts cache reads apart from `input_tokens` (which are the rest)."""
    cached = record.cached_tokens
    return {"input_tokens": record.input_tokens - cached, "output_tokens": len(record.output_ids),
            "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}


def _opening(event: ItemStarted) -> dict[str, Any]:
    if event.kind == "reasoning":
        return {"type": "thinking", "thinking": "", "signature": ""}
    if event.kind == "tool_call":
        return {"type": "tool_use", "id": event.call_id, "name": event.name, "input": {}}
    return {"type": "text", "text": ""}


def _thinking(text: str, ids: list[int] | None, show: bool) -> dict[str, Any]:
    return {"type": "thinking", "thinking": text if show else "", "signature": reasoning_blob.seal(text, ids)}


def _input(arguments: str) -> Any:
    """The call's arguments as the object `input` is; text that is not a JSON object goes as
    `{"input": text}` (a tool_use input is always an object)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"input": arguments}
    return value if isinstance(value, dict) else {"input": value}


def _event(kind: str, **fields: Any) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"
