"""Validation against the Open Responses specification (tests/data/openresponses/openapi.json,
spec version 2026-04-24), the way its compliance suite validates (src/lib/sse-parser.ts):
every response object as `ResponseResource`, every streamed event against the union of the
streaming event schemas, over WebSocket that union plus `WebSocketErrorEvent`."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

SPEC = Path(__file__).parents[1] / "data" / "openresponses" / "openapi.json"
VERSION = "2026-04-24"

# The suite's `streamingEventSchema` union (sse-parser.ts), in its order.
STREAMING_EVENTS = [
    "ResponseCreatedStreamingEvent", "ResponseQueuedStreamingEvent", "ResponseInProgressStreamingEvent",
    "ResponseCompletedStreamingEvent", "ResponseFailedStreamingEvent", "ResponseIncompleteStreamingEvent",
    "ResponseOutputItemAddedStreamingEvent", "ResponseOutputItemDoneStreamingEvent",
    "ResponseContentPartAddedStreamingEvent", "ResponseContentPartDoneStreamingEvent",
    "ResponseOutputTextDeltaStreamingEvent", "ResponseOutputTextDoneStreamingEvent",
    "ResponseRefusalDeltaStreamingEvent", "ResponseRefusalDoneStreamingEvent",
    "ResponseFunctionCallArgumentsDeltaStreamingEvent", "ResponseFunctionCallArgumentsDoneStreamingEvent",
    "ResponseReasoningSummaryPartAddedStreamingEvent", "ResponseReasoningSummaryPartDoneStreamingEvent",
    "ResponseReasoningDeltaStreamingEvent", "ResponseReasoningDoneStreamingEvent",
    "ResponseReasoningSummaryDeltaStreamingEvent", "ResponseReasoningSummaryDoneStreamingEvent",
    "ResponseOutputTextAnnotationAddedStreamingEvent", "ErrorStreamingEvent",
]
WEBSOCKET_EVENTS = [*STREAMING_EVENTS, "WebSocketErrorEvent"]


@functools.cache
def _components() -> dict[str, Any]:
    doc = json.loads(SPEC.read_text())
    assert doc["info"]["version"] == VERSION, doc["info"]
    return {"components": doc["components"]}


@functools.cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({**_components(), "$ref": f"#/components/schemas/{name}"})


def errors(name: str, instance: Any) -> list[str]:
    """What is wrong with `instance` as an object of schema `name` (empty: it conforms)."""
    found = sorted(_validator(name).iter_errors(instance), key=lambda e: list(e.absolute_path))
    return [f"{name} at {'/'.join(map(str, e.absolute_path)) or '.'}: {e.message[:300]}" for e in found]


@functools.cache
def _by_type(websocket: bool) -> dict[str, list[str]]:
    """Event type -> the schemas of the union that declare it."""
    schemas = _components()["components"]["schemas"]
    named: dict[str, list[str]] = {}
    for name in WEBSOCKET_EVENTS if websocket else STREAMING_EVENTS:
        for value in schemas[name]["properties"]["type"]["enum"]:
            named.setdefault(value, []).append(name)
    return named


def event_errors(event: dict[str, Any], *, websocket: bool = False) -> list[str]:
    """Empty when `event` is one of the union's events (a union: any member that fits will do)."""
    names = _by_type(websocket).get(event.get("type", ""))
    if names is None:
        return [f"event type {event.get('type')!r} is not in the Open Responses streaming events"]
    found = [errors(name, event) for name in names]
    return [] if any(not problems for problems in found) else [p for problems in found for p in problems]
