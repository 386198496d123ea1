"""Errors over WebSocket: nested `{"type": "error", "status", "error": {…}}` events.

Unlike HTTP, an error here usually leaves the connection open: it answers one
`response.create` (or one malformed frame) and the client carries on.
"""

from __future__ import annotations

from typing import Any

from gateway.core.errors import APIError, invalid_request

__all__ = ["concurrent_request", "connection_limit_reached", "error_event", "invalid_json", "processing_error",
           "unknown_event_type"]


def error_event(exc: APIError, stream_id: str | None = None) -> dict[str, Any]:
    """Always with a string `code` (Open Responses' WebSocketErrorEvent requires one): an error
    that names no code of its own goes out under its type's."""
    error = exc.error_object()
    if error["code"] is None:
        error["code"] = exc.type
    event: dict[str, Any] = {"type": "error", "status": exc.status, "error": error}
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event


def invalid_json(detail: str) -> APIError:
    return invalid_request(f"The message is not a JSON object: {detail}.", code="invalid_json")


def unknown_event_type(kind: Any) -> APIError:
    return invalid_request(f"Unsupported event type {kind!r}; this endpoint accepts 'response.create' and "
                           "'response.steer'.",
                           param="type", code="unknown_event_type")


def concurrent_request(reason: str) -> APIError:
    return invalid_request(f"Too many concurrent requests on this connection: {reason}.", code="concurrent_request")


def processing_error() -> APIError:
    return APIError("The server failed while processing this response; the connection's cached response was "
                    "discarded.", status=500, type="server_error", code="processing_error")


def connection_limit_reached(reason: str) -> APIError:
    return invalid_request(f"Responses websocket connection limit reached ({reason}). Create a new websocket "
                           f"connection to continue.", code="websocket_connection_limit_reached")
