"""`response.create` frames → the POST body the HTTP endpoint reads.

The frame is the POST body, flat, plus `type` and the WebSocket-only `generate` and
`stream_id`; continuations are parsed by gateway/adapters/continuation.py as over HTTP.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from gateway.adapters.validation import expect
from gateway.core.errors import invalid_request
from gateway.ws.error_events import unknown_event_type

__all__ = ["CreateRequest", "frame_stream_id", "read_create"]

_STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_TRANSPORT_FIELDS = frozenset({"type", "stream", "background", "generate", "stream_id"})


@dataclass(slots=True)
class CreateRequest:
    body: dict[str, Any]  # the Responses body, transport fields removed
    stream_id: str | None
    generate: bool
    received: float = field(default_factory=time.perf_counter)  # when the frame arrived, for latency and TTFT


def frame_stream_id(frame: dict[str, Any]) -> str | None:
    """The frame's lane if it names a valid one, to tag errors about the frame itself."""
    stream_id = frame.get("stream_id")
    return stream_id if isinstance(stream_id, str) and _STREAM_ID.fullmatch(stream_id) else None


def read_create(frame: dict[str, Any]) -> CreateRequest:
    if frame.get("type") != "response.create":
        raise unknown_event_type(frame.get("type"))
    stream_id = expect(frame.get("stream_id"), str, "stream_id")
    if stream_id is not None and not _STREAM_ID.fullmatch(stream_id):
        raise invalid_request("Invalid 'stream_id': expected 1-256 characters of A-Z, a-z, 0-9, '_', '.', '-'.",
                              param="stream_id", code="invalid_value")
    if expect(frame.get("background"), bool, "background"):
        raise invalid_request("'background' responses are not supported over WebSocket.", param="background",
                              code="unsupported_parameter")
    generate = expect(frame.get("generate"), bool, "generate")
    body = {key: value for key, value in frame.items() if key not in _TRANSPORT_FIELDS}
    return CreateRequest(body, stream_id, generate is not False)
