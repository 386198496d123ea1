"""Setting up OTLP trace export with the OpenTelemetry SDK, once per gateway process.

Traces are on when an endpoint is given: `--otlp-traces-endpoint URL` (vLLM's flag, used as
given, like vLLM does), else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT
(the SDK adds `/v1/traces` to it for http/protobuf). Everything else is the SDK's standard
environment: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL / OTEL_EXPORTER_OTLP_PROTOCOL (`http/protobuf`,
the default, or `grpc`), …_HEADERS, …_TIMEOUT, …_COMPRESSION, …_CERTIFICATE, OTEL_SERVICE_NAME
(default `vllm-gateway`), OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER / _ARG, OTEL_BSP_*,
OTEL_PROPAGATORS; OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn them off.
Spans are exported in batches from a thread of their own, never on the event loop, encoded by
gateway/server/otlp.py (the same OTLP message as the exporters' own encoder, a few times faster;
its `Batches` is the SDK's batch span processor, cheaper for the request that ends a span).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from gateway.core import tracing
from gateway.core.settings import Settings

__all__ = ["replica_options", "start", "stop"]

PROTOCOLS = ("http/protobuf", "grpc")
SERVICE_NAME = "vllm-gateway"


def endpoint(settings: Settings, environ: Mapping[str, str] = os.environ) -> str | None:
    """Where traces go (None: traces off)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return None
    return (settings.otlp_traces_endpoint or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None)


def protocol(environ: Mapping[str, str] = os.environ) -> str:
    value = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
             or "http/protobuf").strip()
    if value not in PROTOCOLS:
        raise ValueError(f"OTLP protocol {value!r} is not supported for traces: use one of {', '.join(PROTOCOLS)}")
    return value


def capture_content(settings: Settings, environ: Mapping[str, str] = os.environ) -> bool:
    """Prompt and output text on spans: only when asked (the flag, or GenAI's standard variable)."""
    asked = environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower() == "true"
    return settings.otlp_traces_capture_content or asked


def start(settings: Settings) -> bool:
    """Export this process's spans if traces are on; True if they are. A process-wide setting:
    `stop` exports what is left when the process ends."""
    url = endpoint(settings)
    if url is None:
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    from gateway.server import otlp

    # An explicit endpoint is used as given; the generic one is left to the exporter (it adds the path).
    explicit = settings.otlp_traces_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    exporter = otlp.span_exporter(protocol(), explicit)
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    resource = _hashed_once(resource)
    provider = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER (default: parent-based, all)
    provider.add_span_processor(otlp.Batches(exporter))
    tracing.use(provider, content=capture_content(settings))
    return True


def _hashed_once(resource: Any) -> Any:
    """`resource`, hashing once: the OTLP encoder groups every span by its resource in a dict,
    and a Resource's own hash writes its attributes out as JSON each time (~5 µs a span)."""
    from opentelemetry.sdk.resources import Resource

    class HashedOnce(Resource):
        def __hash__(self) -> int:
            if (value := self.__dict__.get("_hash")) is None:
                value = self.__dict__["_hash"] = super().__hash__()
            return value

    return HashedOnce(resource.attributes, resource.schema_url)


def replica_options(settings: Settings, environ: Mapping[str, str] = os.environ) -> tuple[list[str], dict[str, str]]:
    """vLLM's flags and environment for a replica the gateway starts (`launch`, the demo) to
    export its own spans where the gateway's go, in the same protocol (vLLM's default is grpc),
    under its own service name: the replica's request span then joins the gateway's trace."""
    url = endpoint(settings, environ)
    if url is None:
        return [], {}
    kind = protocol(environ)
    explicit = settings.otlp_traces_endpoint or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not explicit and kind == "http/protobuf":  # vLLM uses its endpoint as given: the signal's path too
        url = url.rstrip("/") + "/v1/traces"
    return ["--otlp-traces-endpoint", url], {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": kind, "OTEL_SERVICE_NAME": "vllm"}


def stop() -> None:
    tracing.shutdown()
