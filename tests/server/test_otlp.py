"""The gateway's OTLP span encoder (gateway/server/otlp.py) against the OTLP exporters' own: for
the same finished spans, what it writes decodes (with opentelemetry-proto) to the very message
`encode_spans` builds — every attribute type, events, status, kinds, parents local and remote,
trace state, several resources and scopes, the SDK's spans and the gateway's; and it leaves a
span with links to that encoder.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

from gateway.core import tracing
from gateway.server.otlp import encode

int64 = st.integers(-(2**63), 2**63 - 1)
floats = st.floats(allow_nan=False)  # NaN is unequal to itself in either message
primitive = st.one_of(st.text(max_size=20), st.booleans(), int64, floats)
values = st.one_of(primitive, st.binary(max_size=8), st.lists(st.text(max_size=5), max_size=4).map(tuple),
                   st.lists(int64, max_size=4).map(tuple), st.lists(st.booleans(), max_size=3).map(tuple),
                   st.lists(floats, max_size=3).map(tuple))
attribute_sets = st.dictionaries(st.text(min_size=1, max_size=12), values, max_size=8)


def decoded(spans: list[ReadableSpan]) -> ExportTraceServiceRequest:
    encoded = encode(spans)
    assert encoded is not None
    return ExportTraceServiceRequest.FromString(encoded)


def sdk_spans(attributes: list[dict], exporter: InMemorySpanExporter | None = None) -> list[ReadableSpan]:
    """Spans made by the SDK's own tracer under two resources and two scopes, with events,
    statuses, every kind, a remote parent with a trace state and local children."""
    exporter = exporter or InMemorySpanExporter()
    made = []
    for resource in (Resource({"service.name": "one", "host.cores": 2}), Resource({"service.name": "two"}, "s://1")):
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        remote = SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, is_remote=True,
                             trace_flags=TraceFlags(1), trace_state=TraceState([("vendor", "v1"), ("other", "x")]))
        for n, scope in enumerate(("gateway", "elsewhere")):
            tracer = provider.get_tracer(scope, "1.2", schema_url="s://scope" if n else None)
            kinds = list(SpanKind)
            for i, attrs in enumerate(attributes):
                parent = set_span_in_context(NonRecordingSpan(remote)) if i % 2 else None
                with tracer.start_as_current_span(f"span {i}", context=parent, kind=kinds[i % len(kinds)],
                                                  attributes=attrs, record_exception=False,
                                                  set_status_on_exception=False) as span:
                    with tracer.start_as_current_span("child") as child:
                        child.add_event("tick", {"n": i, "why": "because"})
                        child.add_event("empty")
                    if i % 3 == 1:
                        span.set_status(Status(StatusCode.ERROR, "it failed"))
                    elif i % 3 == 2:
                        span.set_status(StatusCode.OK)
        made += exporter.get_finished_spans()
        exporter.clear()
        provider.shutdown()
    return made


@settings(max_examples=60, deadline=None)
@given(st.lists(attribute_sets, min_size=1, max_size=4))
def test_what_it_writes_is_the_message_the_otlp_encoder_builds(attributes) -> None:
    spans = sdk_spans(attributes)
    assert decoded(spans) == encode_spans(spans)


def test_the_gateways_own_spans_and_an_exception_event_encode_alike() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        traceparent = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        opened = tracing.start_request("POST /v1/responses", [(b"traceparent", traceparent)],
                                       {"gateway.api": "responses_http", "gateway.request_id": "req-1"})
        assert opened is not None
        with tracing.phase("gateway.render"):
            generation = tracing.start_span("chat tiny", SpanKind.CLIENT)
        assert generation is not None
        tracing.end(generation, {"gen_ai.response.finish_reasons": ("stop",), "server.port": 8000,
                                 "gen_ai.latency.time_to_first_token": 0.25, "gateway.spliced": True})
        opened[0].record_exception(ValueError("bad input"))
        tracing.end_request(opened, {"http.response.status_code": 500}, error="the generation failed")
    finally:
        tracing.use(None)
        provider.shutdown()
    spans = list(exporter.get_finished_spans())
    assert [type(span) for span in spans] == [tracing.Recording, tracing.Recording]
    message = decoded(spans)
    assert message == encode_spans(spans)
    [request, generation] = sorted(message.resource_spans[0].scope_spans[0].spans, key=lambda s: s.kind)
    assert (request.name, request.status.code, request.events[0].name) == ("POST /v1/responses", 2, "exception")
    assert generation.parent_span_id == request.span_id and request.flags == 0x300  # a remote parent
    assert math.isclose(next(a.value.double_value for a in generation.attributes
                             if a.key == "gen_ai.latency.time_to_first_token"), 0.25)


def test_a_span_with_links_is_left_to_the_otlp_encoder() -> None:
    linked = SpanContext(1, 2, is_remote=False)
    span = ReadableSpan("linked", SpanContext(3, 4, is_remote=False), links=[Link(linked)])
    assert encode([span]) is None
    assert encode([ReadableSpan("plain", SpanContext(3, 5, is_remote=False), attributes={"a": 1})]) is not None


def test_values_that_repeat_and_values_that_do_not_encode_alike_over_many_batches() -> None:
    """The encoder keeps a repeated attribute's bytes: ids (a new value every span) stop being
    kept, and True, 1 and "1" under one key stay three values."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        for i in range(700):
            opened = tracing.start_request("POST /v1/responses", [], {"gateway.api": "responses_http",
                                                                      "gateway.request_id": f"req-{i}"})
            assert opened is not None
            same = (True, 1, "1", 1.0)[i % 4]
            tracing.end_request(opened, {"http.response.status_code": 200, "gen_ai.usage.output_tokens": i,
                                         "same": same, "gateway.outcome": "completed"})
    finally:
        tracing.use(None)
        provider.shutdown()
    spans = list(exporter.get_finished_spans())
    for batch in (spans[:300], spans[300:]):  # the ids' keys are given up on in the first
        assert decoded(batch) == encode_spans(batch)
