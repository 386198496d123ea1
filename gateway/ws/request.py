"""The frames a WebSocket client sends, as typed models: `response.create` and `response.steer`.

A `response.create` frame is the POST body, flat, plus `type` and the WebSocket-only `generate`
and `stream_id`: those are typed here (`CreateFrame`), the body by the Responses model as over
HTTP (gateway/adapters/request_schema.py), and `read_create` gives the POST body the HTTP
endpoint reads; continuations are parsed by gateway/adapters/responses/_continuation.py as over HTTP. A
`response.steer` frame (`SteerFrame`, OpenAI's `ResponseSteerEvent`) is read by gateway/ws/_steer.py.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from gateway.adapters.request_schema import validate
from gateway.core.errors import invalid_request
from gateway.ws.error_events import unknown_event_type

__all__ = ["CreateFrame", "CreateRequest", "SteerFrame", "frame_stream_id", "read_create"]

_STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_TRANSPORT_FIELDS = frozenset({"type", "stream", "background", "generate", "stream_id"})


def _stream_id(value: str) -> str:
    if not _STREAM_ID.fullmatch(value):
        raise ValueError("expected 1-256 characters of A-Z, a-z, 0-9, '_', '.', '-'")
    return value


class CreateFrame(BaseModel):
    """A `response.create` frame's own fields; the others are the Responses body's."""

    model_config = ConfigDict(strict=True, extra="allow")

    type: Literal["response.create"]
    stream_id: Annotated[str, AfterValidator(_stream_id)] | None = None
    background: bool | None = None
    generate: bool | None = None


class _Part(BaseModel):
    """A content part: its kind here, its fields checked as `response.create` input is, in the successor."""

    model_config = ConfigDict(extra="allow")
    type: Literal["input_text", "input_image", "input_file"]


class _UserMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["message"] | None = None
    role: Literal["user"]
    content: str | list[_Part]


class SteerFrame(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["response.steer"]
    previous_response_id: str = Field(min_length=1)
    input: str | list[_UserMessage] = Field(min_length=1)


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
    create = validate(CreateFrame, frame)
    if create.background:
        raise invalid_request("'background' responses are not supported over WebSocket.", param="background",
                              code="unsupported_parameter")
    body = {key: value for key, value in frame.items() if key not in _TRANSPORT_FIELDS}
    return CreateRequest(body, create.stream_id, create.generate is not False)
