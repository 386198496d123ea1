"""Traces (OpenTelemetry): the one tracer the gateway's spans come from, or none at all.

`tracer` is None unless this process exports traces (`--otlp-traces-endpoint`, or the standard
OTEL_EXPORTER_OTLP_*ENDPOINT variables: gateway/server/tracing.py sets it up). Every helper
here looks at it first, so a gateway without traces pays one attribute load per request and
per phase, and nothing per token. Spans live in OpenTelemetry's context, a context variable
like the request id of gateway/core/logs.py: the request's span is current while the request
is served, and every upstream request carries the current one as `traceparent`
(`upstream_headers`), so the replica's own spans join the trace.

A span costs the SDK tens of microseconds to make and as much again to encode for export, so a
request makes two: its own and its generation's (the call a replica's spans hang under). Its
phases (prepare, render, admission, commit) are not spans: each is a perf_counter pair summed
into the request span's `<phase>.duration` attribute (seconds), set with the rest when it ends.
A request the sampler leaves out (`is_recording()` false) builds no attribute at all. Work that
is a call elsewhere (a prefill leg on another replica) is a child `span`.

Attribute names follow OpenTelemetry's GenAI semantic conventions (`gen_ai.*`). Prompt and
output text is never put on a span unless `capture_content` is set (an explicit flag).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from contextvars import ContextVar, Token
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

__all__ = ["Opened", "capture_content", "current", "end", "end_request", "log_ids", "phase", "propagation_headers",
           "recording", "shutdown", "span", "start_request", "start_span", "tracer", "upstream_headers", "use"]

tracer: trace.Tracer | None = None  # None: traces are off
capture_content = False  # prompt and output text on the spans (off: never)
_provider: Any = None


def use(provider: trace.TracerProvider | None, *, content: bool = False) -> None:
    """Make `provider` the source of the gateway's spans (None: traces off)."""
    global tracer, capture_content, _provider
    _provider = provider
    tracer = provider.get_tracer("vllm-agent-gateway") if provider is not None else None
    capture_content = content and provider is not None


class _HeaderList(Getter[Iterable[tuple[bytes, bytes]]]):
    """Reads W3C headers (`traceparent`, `tracestate`, `baggage`) from ASGI's header pairs."""

    def get(self, carrier: Iterable[tuple[bytes, bytes]], key: str) -> list[str] | None:
        name = key.encode("latin-1")
        values = [value.decode("latin-1") for header, value in carrier if header == name]
        return values or None

    def keys(self, carrier: Iterable[tuple[bytes, bytes]]) -> list[str]:
        return [header.decode("latin-1") for header, _ in carrier]


_HEADERS = _HeaderList()


# The current request's phase times (seconds by attribute name), while its span records.
_phases: ContextVar[dict[str, float] | None] = ContextVar("phase_seconds", default=None)
Opened = tuple[Span, object, Token]  # a request's span, its context token, its phase times' token


def start_request(name: str, headers: Iterable[tuple[bytes, bytes]], attributes: Mapping[str, Any]) -> Opened | None:
    """Open a request's span as a child of the caller's `traceparent` (if it sent one) and make
    it current; `end_request` closes it. None when traces are off."""
    if tracer is None:
        return None
    parent = propagate.extract(list(headers), getter=_HEADERS)
    span = tracer.start_span(name, context=parent, kind=SpanKind.SERVER)
    recording = span.is_recording()
    if recording:
        span.set_attributes(attributes)
    return span, context.attach(trace.set_span_in_context(span, parent)), _phases.set({} if recording else None)


def end_request(opened: Opened, attributes: Mapping[str, Any] | None = None, error: str | None = None) -> None:
    """Close a request's span with `attributes` and its phases' times (if it records)."""
    span, token, phases = opened
    times = _phases.get()
    if times is not None:
        span.set_attributes({**(attributes or {}), **{name: round(seconds, 6) for name, seconds in times.items()}})
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
    span.end()
    _phases.reset(phases)
    context.detach(token)


def recording() -> bool:
    """The current request's span is recorded (traces on and the request sampled)."""
    return _phases.get() is not None


_OFF = contextlib.nullcontext()  # what a phase is when traces are off or the request not sampled: nothing, shared


class _Phase:
    """A phase's time, added to its request's `<name>.duration` as it ends (however it ends)."""

    __slots__ = ("attribute", "started", "times")

    def __init__(self, attribute: str, times: dict[str, float]) -> None:
        self.attribute, self.times = attribute, times

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, *exc_info: object) -> None:
        self.times[self.attribute] = self.times.get(self.attribute, 0.0) + time.perf_counter() - self.started


def phase(name: str) -> contextlib.AbstractContextManager[None]:
    """Time one phase of the current request into its span's `<name>.duration` (a phase run
    twice, as a tool loop's renders, adds up); nothing when its span does not record."""
    times = _phases.get()
    if times is None:
        return _OFF
    return _Phase(name + ".duration", times)


def span(name: str, attributes: Mapping[str, Any] | None = None,
         kind: SpanKind = SpanKind.INTERNAL) -> contextlib.AbstractContextManager[Span | None]:
    """A child span of the current one around a block, for work whose own timing and place in
    the trace matter (a call to another replica, whose spans hang under it); an exception
    leaving it marks it failed. Nothing when traces are off or the request is not sampled."""
    if tracer is None or _phases.get() is None:
        return _OFF
    return tracer.start_as_current_span(name, kind=kind, attributes=attributes)


def start_span(name: str, kind: SpanKind = SpanKind.INTERNAL) -> Span | None:
    """A child span of the current one that outlives the block that opens it (a generation,
    open from its request to its last token): `current(span)` makes it the current one where
    its work happens, `end` closes it. None when traces are off. Its attributes are the
    caller's to set, when `span.is_recording()`."""
    if tracer is None:
        return None
    return tracer.start_span(name, kind=kind)


def current(span: Span | None) -> contextlib.AbstractContextManager[Any]:
    """`span` is the current span in the block (what `upstream_headers` sends on)."""
    return _OFF if span is None else trace.use_span(span, end_on_exit=False)


def end(span: Span, attributes: Mapping[str, Any], error: str | None = None) -> None:
    if span.is_recording():
        span.set_attributes(attributes)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
    span.end()


def current_span() -> Span | None:
    """The span being served now, if traces are on and one is open."""
    if tracer is None:
        return None
    span = trace.get_current_span()
    return span if span.get_span_context().is_valid else None


def propagation_headers() -> dict[str, str]:
    """The current span as W3C headers (`traceparent`, `tracestate` when there is one) for a
    request to a replica; empty when traces are off."""
    carrier: dict[str, str] = {}
    if tracer is not None:
        propagate.inject(carrier)
    return carrier


def upstream_headers() -> bytes:
    """`propagation_headers` as HTTP/1.1 header lines, each ending in CRLF; empty when off."""
    if tracer is None:
        return b""
    return b"".join(b"%s: %s\r\n" % (key.encode("latin-1"), value.encode("latin-1"))
                    for key, value in propagation_headers().items())


def log_ids() -> tuple[str, str] | None:
    """The current trace and span ids in hex, for a log line; None when there is no span."""
    span = current_span()
    if span is None:
        return None
    ids = span.get_span_context()
    return format(ids.trace_id, "032x"), format(ids.span_id, "016x")


def shutdown() -> None:
    """Export what is still buffered and stop (the process is ending)."""
    provider = _provider
    use(None)
    if provider is not None and hasattr(provider, "shutdown"):
        provider.shutdown()
