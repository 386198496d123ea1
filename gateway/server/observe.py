"""Per-request observation: request ids, and one record per finished request.

A `Trace` spans one request: an HTTP POST to a generation route, or one `response.create`
on a WebSocket. The turn serving it attaches itself (`attach`, from `Turn.__init__`), and
when the request ends `finish` reads what the turn recorded — tokens, splice, replica,
first-token time — into the metrics and one access log line. Nothing is counted on the
hot path itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.datastructures import MutableHeaders
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect, WebSocketDisconnected

from gateway.core import logs
from gateway.core.ids import new_id
from gateway.server.metrics import Metrics

if TYPE_CHECKING:
    from gateway.pipeline.turn import Turn

access_log = logging.getLogger("gateway.access")

# POST routes that generate, by the `api` label they are counted under.
APIS = {"/v1/responses": "responses_http", "/v1/chat/completions": "chat"}

# A client's X-Request-Id is kept if it is short printable ASCII; otherwise we make one.
_CLIENT_ID = re.compile(rb"[\x21-\x7e]{1,128}")

# How a request ends when its client (or the server, closing a socket) leaves first.
_GONE = (asyncio.CancelledError, ClientDisconnect, WebSocketDisconnect, WebSocketDisconnected)


@dataclass(eq=False, slots=True)
class Trace:
    api: str
    request_id: str
    received: float  # time.perf_counter() when the request arrived
    turn: Turn | None = None
    status: int = 200  # the HTTP status answered, or the status of a WebSocket error event
    cancelled: bool = False  # the client left (or the server shut the socket) before the end

    @property
    def outcome(self) -> str:
        """completed | incomplete | failed | cancelled, or the status of an error answer."""
        if self.status >= 400:
            return str(self.status)
        turn = self.turn
        if turn is not None and turn.interrupted is not None:  # a failure, or the client left (GeneratorExit)
            return "failed" if isinstance(turn.interrupted, Exception) else "cancelled"
        if self.cancelled:
            return "cancelled"
        if turn is None:  # nothing to generate (a WebSocket `generate: false` warmup)
            return "completed"
        if turn.replica is None:  # refused before it was sent, answered in-stream (context length)
            return "failed"
        if turn.finish_reason is None:  # accepted, but the client left before the events were read
            return "cancelled"
        if turn.finish_reason == "length":
            return "incomplete"
        return "failed" if turn.finish_reason == "abort" else "completed"


_current: ContextVar[Trace | None] = ContextVar("trace", default=None)


def attach(turn: Turn) -> None:
    """Make `turn` the one the current request is measured by."""
    if (trace := _current.get()) is not None:
        trace.turn = turn


def error(status: int) -> None:
    """The current request was answered with an error (WebSocket error events)."""
    if (trace := _current.get()) is not None:
        trace.status = status


@contextlib.contextmanager
def traced(api: str, metrics: Metrics, request_id: str, received: float) -> Iterator[Trace]:
    trace = Trace(api, request_id, received)
    tokens = _current.set(trace), logs.request_id.set(request_id)
    metrics.in_progress.labels(api).inc()
    try:
        yield trace
    except _GONE:
        trace.cancelled = True
        raise
    except Exception:
        trace.status = 500
        raise
    finally:
        finish(trace, metrics)
        _current.reset(tokens[0])
        logs.request_id.reset(tokens[1])


def finish(trace: Trace, metrics: Metrics) -> None:
    """Count the request and log its access line: one synchronous step, so a scrape that sees
    `gateway_requests_in_progress` drop also sees everything else this request added."""
    api, turn, outcome = trace.api, trace.turn, trace.outcome
    duration = time.perf_counter() - trace.received
    metrics.in_progress.labels(api).dec()
    metrics.requests.labels(api, outcome).inc()
    metrics.duration.labels(api).observe(duration)
    fields: dict[str, Any] = {"api": api, "outcome": outcome, "status": trace.status,
                              "duration": round(duration, 4)}
    if turn is not None:
        sent = turn.replica is not None
        prefix = turn.request.prefix
        ttft = turn.first_token_at - trace.received if turn.first_token_at is not None else None
        if ttft is not None:
            metrics.ttft.labels(api).observe(ttft)
        if sent:
            metrics.prompt_tokens.labels(api).inc(turn.input_tokens)
            metrics.cached_tokens.labels(api).inc(turn.cached_tokens)
            if turn.spliced and prefix is not None:
                metrics.splices.labels(api).inc()
                metrics.spliced_tokens.labels(api).inc(len(prefix.tokens))
            if turn.non_monotonic:
                metrics.splice_fallbacks.labels(api).inc()
        metrics.output_tokens.labels(api).inc(len(turn.output_ids))
        if turn.attempts > 1:
            metrics.retries.labels(api).inc(turn.attempts - 1)
        fields |= {"model": turn.runtime.model_name, "prompt_tokens": turn.input_tokens if sent else 0,
                   "output_tokens": len(turn.output_ids), "cached_tokens": turn.cached_tokens,
                   "spliced": turn.spliced, "splice_fallback": turn.non_monotonic,
                   "finish_reason": turn.finish_reason, "ttft": round(ttft, 4) if ttft is not None else None,
                   "replica": turn.replica, "retries": max(turn.attempts - 1, 0),
                   "upstream_request_id": turn.request_id}
    access_log.info(" ".join(f"{key}={value}" for key, value in fields.items()), extra={"fields": fields})


class ObserveMiddleware:
    """Gives every HTTP request an id (the client's `X-Request-Id`, else a new one), echoes it
    in the response headers, and traces requests to the generation routes."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        received = time.perf_counter()
        request_id = _client_request_id(scope) or new_id("req")
        api = APIS.get(scope["path"]) if scope["method"] == "POST" else None

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)["x-request-id"] = request_id
                if (trace := _current.get()) is not None:
                    trace.status = message["status"]
            await send(message)

        if api is None:
            token = logs.request_id.set(request_id)
            try:
                await self.app(scope, receive, send_with_id)
            finally:
                logs.request_id.reset(token)
            return
        with traced(api, self.metrics, request_id, received):
            await self.app(scope, receive, send_with_id)


def _client_request_id(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            return value.decode("ascii") if _CLIENT_ID.fullmatch(value) else None
    return None
