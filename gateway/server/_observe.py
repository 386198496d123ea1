"""Per-request observation: request ids, and one record per finished request.

A `Trace` (gateway/pipeline/trace.py) spans one request: an HTTP POST to a generation
route, or one `response.create` on a WebSocket. The session module attaches the turn's
record to it, and when the request ends `finish` reads what the turn recorded — tokens,
splice, replica, first-token time — and the error the client was told, if any, into the
metrics and one access log line. Nothing is counted on the hot path itself.

With traces on (gateway/core/tracing.py), the request is one span too, continuing the caller's
`traceparent` (the HTTP request's, or the WebSocket handshake's for each `response.create`);
it ends after the access line, which carries its trace id, with its outcome and its phases'
times (the model, usage and timing are its generation's span's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Iterator, Sequence
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect, WebSocketDisconnected

from gateway.core import logs, tenancy, tracing
from gateway.core.ids import new_id
from gateway.pipeline.trace import Trace, current
from gateway.server._metrics import Metrics
from gateway.upstream.router import DECISIONS, Decision

__all__ = ["ObserveMiddleware", "traced"]

access_log = logging.getLogger("gateway.access")

# POST routes that generate, by the `api` label they are counted under.
APIS = {"/v1/responses": "responses_http", "/v1/responses/compact": "responses_compact",
        "/v1/chat/completions": "chat", "/v1/messages": "messages"}

# A client's X-Request-Id is kept if it is short printable ASCII; otherwise we make one.
_CLIENT_ID = re.compile(rb"[\x21-\x7e]{1,128}")

# How a request ends when its client (or the server, closing a socket) leaves first.
_GONE = (asyncio.CancelledError, ClientDisconnect, WebSocketDisconnect, WebSocketDisconnected)


@contextlib.contextmanager
def traced(api: str, metrics: Metrics, request_id: str, received: float, *, span_name: str = "",
           headers: Sequence[tuple[bytes, bytes]] = ()) -> Iterator[Trace]:
    """Observe one request: `span_name` and `headers` (its caller's, for `traceparent`) are its span's."""
    trace = Trace(api, request_id, received)
    if (tenant := tenancy.current.get()) is not None:  # a WebSocket's (an HTTP request's is known later)
        trace.tenant = tenant.name
    decisions: list[Decision] = []  # the router's, for this request's turns (gateway/upstream/router.py)
    tokens = current.set(trace), logs.request_id.set(request_id), DECISIONS.set(decisions)
    span = tracing.start_request(span_name or api, headers, {"gateway.api": api, "gateway.request_id": request_id}) \
        if tracing.tracer is not None else None
    metrics.in_progress.labels(api).inc()
    try:
        yield trace
    except _GONE:
        trace.cancelled = True
        raise
    except Exception as exc:
        trace.status = 500
        if span is not None:
            span[0].record_exception(exc)
        raise
    finally:
        finish(trace, metrics, _serving(decisions, trace.record.replica if trace.record is not None else None))
        if span is not None:
            _end_span(span, trace)
        current.reset(tokens[0])
        logs.request_id.reset(tokens[1])
        DECISIONS.reset(tokens[2])


def _end_span(span: tracing.Opened, trace: Trace) -> None:
    """The request's outcome on its span, then the span's end."""
    if not tracing.recording():  # sampled out
        tracing.end_request(span)
        return
    outcome = trace.outcome
    attributes: dict[str, Any] = {"gateway.outcome": outcome}
    if trace.api != "responses_ws":
        attributes["http.response.status_code"] = trace.status
    if trace.tenant is not None:
        attributes["gateway.tenant"] = trace.tenant
    if trace.response_id is not None:
        attributes["gen_ai.response.id"] = trace.response_id
    failed = outcome == "failed" or trace.status >= 500
    if outcome not in ("completed", "incomplete"):
        attributes["error.type"] = trace.error_code or outcome
    tracing.end_request(span, attributes, (trace.error_message or outcome) if failed else None)


def _serving(decisions: list[Decision], replica: str | None) -> Decision | None:
    """The routing decision of the replica that served the request (a split turn also picked its
    prefill replica, after it); the last one when none served it."""
    return next((d for d in reversed(decisions) if d.replica == replica), decisions[-1] if decisions else None)


def finish(trace: Trace, metrics: Metrics, decision: Decision | None = None) -> None:
    """Count the request and log its access line: one synchronous step, so a scrape that sees
    `gateway_requests_in_progress` drop also sees everything else this request added."""
    api, record, outcome = trace.api, trace.record, trace.outcome
    duration = time.perf_counter() - trace.received
    metrics.in_progress.labels(api).dec()
    metrics.requests.labels(api, outcome).inc()
    metrics.duration.labels(api).observe(duration)
    fields: dict[str, Any] = {"api": api, "outcome": outcome, "status": trace.status,
                              "duration": round(duration, 4)}
    if trace.tenant is not None:
        fields["tenant"] = trace.tenant
    ttft = itl = None
    if record is not None:
        sent = record.replica is not None
        if record.first_token_at is not None:
            ttft = record.first_token_at - trace.received
            metrics.ttft.labels(api).observe(ttft)
            if len(record.output_ids) > 1:  # the decode pace: the tokens after the first over their time
                itl = (trace.received + duration - record.first_token_at) / (len(record.output_ids) - 1)
                metrics.itl.labels(api).observe(itl)
        if sent:
            metrics.prompt_tokens.labels(api).inc(record.input_tokens)
            metrics.cached_tokens.labels(api).inc(record.cached_tokens)
            if record.spliced and record.prefix is not None:
                metrics.splices.labels(api).inc()
                metrics.spliced_tokens.labels(api).inc(len(record.prefix.tokens))
            if record.non_monotonic:
                metrics.non_monotonic.labels(api).inc()
        metrics.output_tokens.labels(api).inc(len(record.output_ids))
        if record.attempts > 1:
            metrics.retries.labels(api).inc(record.attempts - 1)
        fields |= {"model": record.model, "prompt_tokens": record.input_tokens if sent else 0,
                   "output_tokens": len(record.output_ids), "cached_tokens": record.cached_tokens,
                   "spliced": record.spliced, "non_monotonic": record.non_monotonic,
                   "finish_reason": record.finish_reason, "ttft": round(ttft, 4) if ttft is not None else None,
                   "replica": record.replica, "retries": max(record.attempts - 1, 0),
                   "upstream_request_id": record.request_id}
        if record.split is not None:  # prefill/decode disaggregation: the decision and the prefill leg
            fields |= record.split
    if decision is not None:  # why that replica, and how much of the prompt it held (best: any replica)
        fields |= {"route": decision.reason, "route_prefix_tokens": decision.matched,
                   "route_best_prefix_tokens": decision.best}
    if outcome != "completed" and trace.error_code is not None:
        fields |= {"error_code": trace.error_code, "error": trace.error_message}
    metrics.recent.add(outcome, trace.error_code, ttft, itl, len(record.output_ids) if record is not None else 0)
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
                if (trace := current.get()) is not None:
                    trace.status = message["status"]
            await send(message)

        if api is None:
            token = logs.request_id.set(request_id)
            try:
                await self.app(scope, receive, send_with_id)
            finally:
                logs.request_id.reset(token)
            return
        with traced(api, self.metrics, request_id, received, span_name=f"POST {scope['path']}",
                    headers=scope["headers"]):
            await self.app(scope, receive, send_with_id)


def _client_request_id(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            return value.decode("ascii") if _CLIENT_ID.fullmatch(value) else None
    return None
