"""When traces are on and where they go: the flag, the standard OTEL_* variables, the switches
that turn them off, the protocol, what a replica the gateway starts is told (`launch`), how
spans are batched for export (OTEL_BSP_*) and the trace headers a replica is sent."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext, TraceFlags

from gateway.core import tracing as core_tracing
from gateway.core.settings import Settings
from gateway.ops._flags import build_parser, settings_from_args
from gateway.ops._launch import serve_supervised
from gateway.ops.vllm_process import VLLMProcess
from gateway.server import otlp, tracing
from tests.support.waiting import wait_for

COLLECTOR = "http://collector:4318/v1/traces"


def settings(endpoint: str | None = None) -> Settings:
    return Settings(model="m", otlp_traces_endpoint=endpoint)


@pytest.mark.parametrize(("flag", "environ", "expected"), [
    (None, {}, None),  # off by default
    (COLLECTOR, {}, COLLECTOR),
    (None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": COLLECTOR}, COLLECTOR),
    (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "http://collector:4318"),
    ("http://flag:4318/v1/traces", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": COLLECTOR}, "http://flag:4318/v1/traces"),
    (COLLECTOR, {"OTEL_SDK_DISABLED": "true"}, None),
    (COLLECTOR, {"OTEL_TRACES_EXPORTER": "none"}, None),
])
def test_the_endpoint_decides_whether_traces_are_on(flag, environ, expected) -> None:
    assert tracing.endpoint(settings(flag), environ) == expected


def test_the_protocol_is_http_protobuf_unless_grpc_is_asked_for() -> None:
    assert tracing.protocol({}) == "http/protobuf"
    assert tracing.protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == "grpc"
    assert tracing.protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                             "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}) == "http/protobuf"
    with pytest.raises(ValueError, match="http/json"):
        tracing.protocol({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"})


def test_content_is_captured_only_when_asked() -> None:
    assert not tracing.capture_content(settings(COLLECTOR), {})
    assert tracing.capture_content(settings(COLLECTOR), {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
    args, _ = build_parser().parse_known_args(["serve", "--otlp-traces-endpoint", COLLECTOR,
                                               "--otlp-traces-capture-content"])
    flagged = settings_from_args(args, model="m", upstreams=[])
    assert flagged.otlp_traces_endpoint == COLLECTOR and tracing.capture_content(flagged, {})


@pytest.mark.parametrize(("flag", "environ", "expected"), [
    (COLLECTOR, {}, (["--otlp-traces-endpoint", COLLECTOR], "http/protobuf")),
    # vLLM takes its endpoint as given: the generic one gets the traces path it would otherwise lack.
    (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, (["--otlp-traces-endpoint", "http://c:4318/v1/traces"],
                                                               "http/protobuf")),
    (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
     (["--otlp-traces-endpoint", "http://c:4317"], "grpc")),
])
def test_a_started_replica_exports_where_the_gateway_does(flag, environ, expected) -> None:
    flags, env = tracing.replica_options(settings(flag), environ)
    assert (flags, env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"]) == expected
    assert env["OTEL_SERVICE_NAME"] == "vllm"  # its own name, not the gateway's from the environment
    assert tracing.replica_options(settings(), {}) == ([], {})


def test_launch_hands_the_endpoint_to_the_replicas_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.ops import _launch as launch

    started = []

    class Supervisor:  # records what would be started; starts nothing
        def __init__(self, processes, **_: object) -> None:
            started.extend(processes)
            self.urls, self.gave_up = [], False

        def start(self) -> None:
            pass

        def stop(self) -> None:
            pass

    monkeypatch.setattr(launch, "Supervisor", Supervisor)
    monkeypatch.setattr(launch, "run", lambda *args, **kwargs: None)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    plain, own = VLLMProcess("m", extra_args=["--seed", "1"]), VLLMProcess("m", extra_args=[
        "--otlp-traces-endpoint", "http://elsewhere:4318/v1/traces"])
    assert serve_supervised([plain, own], settings(COLLECTOR)) == 0
    assert started == [plain, own]
    assert plain.command()[-4:] == ["--seed", "1", "--otlp-traces-endpoint", COLLECTOR]
    assert plain.environment()["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert own.command().count("--otlp-traces-endpoint") == 1  # the user's own flag wins


class Collected(SpanExporter):
    """The batches an exporter was handed, in order."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.batches.append([span.name for span in spans])
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.batches.append(["shut down"])


def ended(processor: otlp.Batches, *names: str) -> None:
    for name in names:
        processor.on_end(ReadableSpan(name, SpanContext(1, 2, is_remote=False, trace_flags=TraceFlags(1))))


def test_spans_are_exported_a_full_batch_at_once_and_the_rest_when_flushed() -> None:
    exporter = Collected()
    processor = otlp.Batches(exporter, {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "3", "OTEL_BSP_SCHEDULE_DELAY": "600000"})
    ended(processor, "a", "b", "c", "d")
    wait_for(lambda: exporter.batches, "the full batch was exported")  # long before the delay
    processor.on_end(ReadableSpan("unsampled", SpanContext(1, 3, is_remote=False)))
    assert exporter.batches == [["a", "b", "c"]]
    ended(processor, "e")
    processor.force_flush()
    assert exporter.batches == [["a", "b", "c"], ["d", "e"]]
    ended(processor, "f")
    processor.shutdown()
    assert exporter.batches[2:] == [["f"], ["shut down"]]


def test_a_batch_not_full_goes_after_the_delay_and_a_bad_setting_is_its_default(caplog) -> None:
    exporter = Collected()
    processor = otlp.Batches(exporter, {"OTEL_BSP_SCHEDULE_DELAY": "20", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "lots"})
    try:
        assert "OTEL_BSP_MAX_EXPORT_BATCH_SIZE='lots' is not a positive number: using 512" in caplog.text
        ended(processor, "a")
        wait_for(lambda: exporter.batches == [["a"]], "the lone span was exported after the delay")
    finally:
        processor.shutdown()


def test_the_replica_is_sent_what_the_propagators_would_write() -> None:
    """Traces the gateway starts go upstream as a `traceparent` written directly; a caller's
    trace headers (baggage, trace state) are passed on by the propagators, as they were sent."""
    provider = TracerProvider()
    core_tracing.use(provider)
    try:
        callers = ([], [(b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
                        (b"tracestate", b"vendor=v1"), (b"baggage", b"tenant=a")])
        for headers in callers:
            opened = core_tracing.start_request("POST /v1/responses", headers, {})
            assert opened is not None
            generation = core_tracing.start_span("chat m")
            with core_tracing.current(generation):
                sent = core_tracing.upstream_headers()
                expected = core_tracing.propagation_headers()
                with core_tracing.span("gateway.prefill") as leg:  # a prefill leg's call, under the generation
                    assert leg is not None and leg.parent.span_id == generation.get_span_context().span_id
                    to_prefill = core_tracing.propagation_headers()["traceparent"].split("-")[2]
                    assert to_prefill == format(leg.get_span_context().span_id, "016x")
                assert core_tracing.upstream_headers() == sent
            assert core_tracing.upstream_headers().split(b"-")[2] == format(opened[0].get_span_context().span_id,
                                                                            "016x").encode()
            core_tracing.end_request(opened)
            assert sent == b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in expected.items())
            assert expected["traceparent"].split("-")[2] == format(generation.get_span_context().span_id, "016x")
            assert sorted(expected) == (["baggage", "traceparent", "tracestate"] if headers else ["traceparent"])
    finally:
        core_tracing.use(None)
        provider.shutdown()
