"""Traces (OpenTelemetry): the one source the gateway's spans come from, or none at all.

`tracer` is None unless this process exports traces (`--otlp-traces-endpoint`, or the standard
OTEL_EXPORTER_OTLP_*ENDPOINT variables: gateway/server/tracing.py sets it up). Every helper
here looks at it first, so a gateway without traces pays one attribute load per request and
per phase, and nothing per token. Spans live in OpenTelemetry's context, a context variable
like the request id of gateway/core/logs.py: the request's span is current while the request
is served, and every upstream request carries the current one as `traceparent`
(`upstream_headers`), so the replica's own spans join the trace.

Every request is meant to be traceable, so a span is cheap to make (what full sampling costs:
docs/observability.md). A request makes two: its own and its generation's (the call a
replica's spans hang under). Its phases (prepare, render, admission, commit) are not spans: each
is a perf_counter pair summed into the request span's `<phase>.duration` attribute (seconds).
A span is a `Recording`: the SDK's sampler, ids, resource and span processors, without the SDK
span's per-call costs (a lock, attribute limits and checks on every set, a second object made
at the end). Its attributes go into a plain dict, set once as it ends; ended, it is handed as
is (it is a ReadableSpan) to the provider's processors, and the batch processor's thread
encodes it (gateway/server/otlp.py). The sampler decides once per request: a child of a
recorded span here is recorded too (what every standard sampler decides for it), and the
default sampler (parent-based, every root sampled) is not asked about a trace the gateway starts.
Such a trace carries no baggage or trace state, so with the default propagators its context
upstream is its `traceparent` alone, written directly (a caller's headers still go through the
propagators). A request the
sampler leaves out gets a non-recording span (its trace context still goes upstream, unsampled)
and builds no attribute at all. Work that is a call elsewhere (a prefill leg on another replica)
is a child `span`.

Attribute names follow OpenTelemetry's GenAI semantic conventions (`gen_ai.*`). Prompt and
output text is never put on a span unless `capture_content` is set (an explicit flag).
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, cast

from opentelemetry import context, propagate, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import Getter
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace import Span as SDKSpan
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util import types

__all__ = ["Opened", "Recording", "capture_content", "current", "end", "end_request", "log_ids", "phase",
           "propagation_headers", "recording", "shutdown", "span", "start_request", "start_span", "tracer",
           "upstream_headers", "use"]

tracer: trace.Tracer | None = None  # None: traces are off
capture_content = False  # prompt and output text on the spans (off: never)
_provider: Any = None
SCOPE = "vllm-agent-gateway"  # the spans' instrumentation scope
_source: _Source | None = None


class _Source:
    """What every span takes from the provider: its sampler, ids, resource, scope, processors."""

    __slots__ = ("ids", "plain", "processor", "random_ids", "resource", "root_sampled", "sampler", "scope",
                 "trace_headers")

    def __init__(self, sdk_tracer: Any) -> None:
        self.sampler, self.ids, self.resource = sdk_tracer.sampler, sdk_tracer.id_generator, sdk_tracer.resource
        self.random_ids = type(self.ids) is RandomIdGenerator
        self.scope = InstrumentationScope(SCOPE)
        processors = sdk_tracer.span_processor  # the SDK's fan-out to every processor the provider has
        only = getattr(processors, "_span_processors", ())  # its processors: one is called directly
        self.processor = only[0] if len(only) == 1 else processors
        textmap = propagate.get_global_textmap()
        self.trace_headers = frozenset(name.encode("latin-1") for name in textmap.fields)
        # The default sampler (parent-based, every root sampled) decides a root span without being asked.
        self.root_sampled = self.sampler.get_description() == _DEFAULT_SAMPLER
        # The default propagators (W3C trace context and baggage): a trace the gateway started has
        # no baggage and no trace state to send, so its `traceparent` is all `upstream_headers` writes.
        self.plain = type(textmap) is CompositePropagator and [type(p) for p in textmap._propagators] == _DEFAULT_PROPAGATORS


def use(provider: TracerProvider | None, *, content: bool = False) -> None:
    """Make `provider` (the SDK's) the source of the gateway's spans (None: traces off)."""
    global tracer, capture_content, _provider, _source
    _provider = provider
    tracer = provider.get_tracer(SCOPE) if provider is not None else None
    _source = _Source(tracer) if tracer is not None else None
    capture_content = content and provider is not None


_UNSET = Status(StatusCode.UNSET)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_DEFAULT_SAMPLER = ParentBased(ALWAYS_ON).get_description()
_DEFAULT_PROPAGATORS = [TraceContextTextMapPropagator, W3CBaggagePropagator]


class Recording(Span, ReadableSpan):
    """A recorded span: the API's Span while it is open, the SDK's ReadableSpan once it ends
    (what processors and exporters take). Attributes are the gateway's own str, bool, int, float
    or tuples of them, set as they are (no limits, no per-value check). `plain`: its trace
    context upstream is its `traceparent` alone (`upstream_headers`)."""

    def __init__(self, name: str, span_context: SpanContext, parent: SpanContext | None, kind: SpanKind,
                 attributes: dict[str, Any], source: _Source, plain: bool = False) -> None:
        self._name, self._context, self._parent, self._kind = name, span_context, parent, kind
        self._attributes, self._source, self.plain = attributes, source, plain
        self.sampled = bool(span_context.trace_flags & 1)  # what a batch processor exports
        self._start_time = time.time_ns()

    # What a span has until it is given one (set once, on the instance): nothing is made per span for them.
    _events: list[Event] | tuple[()] = ()
    _links: list[trace.Link] | tuple[()] = ()
    _status = _UNSET
    _end_time: int | None = None
    _instrumentation_info = None

    @property
    def _resource(self) -> Any:  # what ReadableSpan's own methods read
        return self._source.resource

    @property
    def resource(self) -> Any:
        return self._source.resource

    @property
    def _instrumentation_scope(self) -> InstrumentationScope:
        return self._source.scope

    @property
    def instrumentation_scope(self) -> InstrumentationScope:
        return self._source.scope

    def get_span_context(self) -> SpanContext:
        return self._context

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        self._attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        self._attributes.update(attributes)

    def add_event(self, name: str, attributes: types.Attributes = None, timestamp: int | None = None) -> None:
        if not self._events:
            self._events = []
        self._events.append(Event(name, attributes, timestamp))  # type: ignore[union-attr]

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if context.is_valid:
            if not self._links:
                self._links = []
            self._links.append(trace.Link(context, attributes))  # type: ignore[union-attr]

    record_exception = SDKSpan.record_exception  # the SDK's exception event (type, message, stack)
    dropped_attributes = dropped_events = dropped_links = 0  # no limits: nothing is dropped

    def update_name(self, name: str) -> None:
        self._name = name

    def is_recording(self) -> bool:
        return self._end_time is None

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """The SDK's rule: OK is final, UNSET changes nothing."""
        if not isinstance(status, Status):
            status = Status(status, description)
        if self._status.status_code is not StatusCode.OK and status.status_code is not StatusCode.UNSET:
            self._status = status

    def end(self, end_time: int | None = None) -> None:
        if self._end_time is None:
            self._end_time = end_time if end_time is not None else time.time_ns()
            self._source.processor.on_end(self)


def _open(name: str, kind: SpanKind, parent_context: context.Context | None, attributes: dict[str, Any],
          plain: bool = False) -> Span:
    """A span under the current one (or `parent_context`'s): a child of a recorded span here is
    recorded; any other span asks the sampler, as the SDK's tracer does. `plain`: the context
    holds nothing the caller sent (no baggage, no trace state)."""
    source = _source
    assert source is not None
    parent = _inner.get() if parent_context is None else None
    if parent is None:
        parent = trace.get_current_span(parent_context)
    parent_ids = parent.get_span_context()
    # The default generator's ids drawn here (0, the invalid id, drawn again by it), a call less each.
    span_id = source.random_ids and random.getrandbits(64) or source.ids.generate_span_id()
    if type(parent) is Recording:  # the request's decision holds for its children
        ids = SpanContext(parent_ids.trace_id, span_id, False, parent_ids.trace_flags, parent_ids.trace_state)
        return Recording(name, ids, parent_ids, kind, attributes, source, parent.plain)
    valid = parent_ids.is_valid
    if not valid and source.root_sampled:  # a new trace, which the default sampler samples
        trace_id = source.random_ids and random.getrandbits(128) or source.ids.generate_trace_id()
        return Recording(name, SpanContext(trace_id, span_id, False, _SAMPLED), None, kind, attributes, source,
                         plain and source.plain)
    trace_id = parent_ids.trace_id if valid else source.ids.generate_trace_id()
    decision = source.sampler.should_sample(parent_context, trace_id, name, kind)
    ids = SpanContext(trace_id, span_id, False, _SAMPLED if decision.decision.is_sampled() else TraceFlags(0),
                      decision.trace_state)
    if not decision.decision.is_recording():
        return NonRecordingSpan(ids)
    if decision.attributes:
        attributes = {**decision.attributes, **attributes}
    return Recording(name, ids, parent_ids if valid else None, kind, attributes, source)


class _HeaderList(Getter[Iterable[tuple[bytes, bytes]]]):
    """Reads W3C headers (`traceparent`, `tracestate`, `baggage`) from ASGI's header pairs."""

    def get(self, carrier: Iterable[tuple[bytes, bytes]], key: str) -> list[str] | None:
        name = key.encode("latin-1")
        values = [value.decode("latin-1") for header, value in carrier if header == name]
        return values or None

    def keys(self, carrier: Iterable[tuple[bytes, bytes]]) -> list[str]:
        return [header.decode("latin-1") for header, _ in carrier]


_HEADERS = _HeaderList()


# The span `current` made current in a block (a generation's, a prefill leg's), kept apart from
# OpenTelemetry's context, where the request's span stays: a variable set and reset, rather than
# a context copied, attached and detached. Spans opened in the block and the headers sent
# upstream from it take it first.
_inner: ContextVar[Span | None] = ContextVar("inner_span", default=None)
# The current request's phase times (seconds by attribute name), while its span records.
_phases: ContextVar[dict[str, float] | None] = ContextVar("phase_seconds", default=None)
Opened = tuple[Span, object, Token]  # a request's span, its context token, its phase times' token


def start_request(name: str, headers: Sequence[tuple[bytes, bytes]], attributes: Mapping[str, Any]) -> Opened | None:
    """Open a request's span as a child of the caller's `traceparent` (if it sent one) and make
    it current; `end_request` closes it. None when traces are off."""
    source = _source
    if source is None:
        return None
    fields, traced = source.trace_headers, False
    for header, _ in headers:
        if header in fields:
            traced = True
            break
    parent = propagate.extract(headers, getter=_HEADERS) if traced else context.Context()
    span = _open(name, SpanKind.SERVER, parent, {**attributes}, plain=not traced)
    recorded = type(span) is Recording
    return span, context.attach(trace.set_span_in_context(span, parent)), _phases.set({} if recorded else None)


def end_request(opened: Opened, attributes: Mapping[str, Any] | None = None, error: str | None = None) -> None:
    """Close a request's span with `attributes` and its phases' times (if it records)."""
    span, token, phases = opened
    times = _phases.get()
    if times is not None:  # recorded (`start_request`): a Recording, its attributes a plain dict
        recorded = cast(Recording, span)._attributes
        if attributes:
            recorded.update(attributes)
        for name, seconds in times.items():
            recorded[name] = round(seconds, 6)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
    span.end()
    _phases.reset(phases)
    context.detach(token)


def recording() -> bool:
    """The current request's span is recorded (traces on and the request sampled)."""
    return _phases.get() is not None


_PHASE_ATTRIBUTES: dict[str, str] = {}  # a phase's attribute by its name (a few)
_OFF = contextlib.nullcontext()  # what a phase is when traces are off or the request not sampled: nothing, shared


class _Phase:
    """A phase's time, added to its request's `<name>.duration` as it ends (however it ends)."""

    __slots__ = ("attribute", "started", "times")

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
    attribute = _PHASE_ATTRIBUTES.get(name)
    if attribute is None:
        attribute = _PHASE_ATTRIBUTES[name] = name + ".duration"
    timed = _Phase.__new__(_Phase)  # no __init__: a call less
    timed.attribute, timed.times = attribute, times
    return timed


def span(name: str, attributes: Mapping[str, Any] | None = None,
         kind: SpanKind = SpanKind.INTERNAL) -> contextlib.AbstractContextManager[Span | None]:
    """A child span of the current one around a block, for work whose own timing and place in
    the trace matter (a call to another replica, whose spans hang under it); an exception
    leaving it marks it failed. Nothing when traces are off or the request is not sampled."""
    if _source is None or _phases.get() is None:
        return _OFF
    return _Current(_open(name, kind, None, dict(attributes or {})), end_on_exit=True)


def start_span(name: str, kind: SpanKind = SpanKind.INTERNAL) -> Span | None:
    """A child span of the current one that outlives the block that opens it (a generation,
    open from its request to its last token): `current(span)` makes it the current one where
    its work happens, `end` closes it. None when traces are off. Its attributes are the
    caller's to set, when `span.is_recording()`."""
    if _source is None:
        return None
    return _open(name, kind, None, {})


class _Current:
    """`span` is the current span in the block, as the API's `use_span`: an exception leaving
    it is recorded on the span and marks it failed."""

    __slots__ = ("end_on_exit", "span", "token")

    def __init__(self, span: Span, *, end_on_exit: bool = False) -> None:
        self.span, self.end_on_exit = span, end_on_exit

    def __enter__(self) -> Span:
        self.token = _inner.set(self.span)
        return self.span

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        _inner.reset(self.token)
        if isinstance(exc, Exception) and self.span.is_recording():
            self.span.record_exception(exc)
            self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        if self.end_on_exit:
            self.span.end()


def current(span: Span | None) -> contextlib.AbstractContextManager[Any]:
    """`span` is the current span in the block (what `upstream_headers` sends on)."""
    return _OFF if span is None else _Current(span)


def end(span: Span, attributes: Mapping[str, Any], error: str | None = None) -> None:
    if type(span) is Recording:
        if span._end_time is None:
            span._attributes.update(attributes)
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, error))
    elif span.is_recording():
        span.set_attributes(attributes)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
    span.end()


def current_span() -> Span | None:
    """The span being served now, if traces are on and one is open."""
    if tracer is None:
        return None
    span = _inner.get() or trace.get_current_span()
    return span if span.get_span_context().is_valid else None


def propagation_headers() -> dict[str, str]:
    """The current span as W3C headers (`traceparent`, `tracestate` when there is one) for a
    request to a replica; empty when traces are off."""
    carrier: dict[str, str] = {}
    if tracer is not None:
        inner = _inner.get()
        propagate.inject(carrier, trace.set_span_in_context(inner) if inner is not None else None)
    return carrier


def upstream_headers() -> bytes:
    """`propagation_headers` as HTTP/1.1 header lines, each ending in CRLF; empty when off."""
    if tracer is None:
        return b""
    span = _inner.get() or trace.get_current_span()
    if type(span) is Recording and span.plain:  # what the propagators would write, without them
        ids = span._context
        return b"traceparent: 00-%032x-%016x-%02x\r\n" % (ids.trace_id, ids.span_id, ids.trace_flags)
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
