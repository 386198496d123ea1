"""Finished spans as an OTLP ExportTraceServiceRequest, in bytes, at a few microseconds a span.

The OTLP exporters' encoder (opentelemetry-exporter-otlp-proto-common) builds a protobuf object
for every span, attribute and value and then serializes the tree: about 40 µs a span of ten
attributes on the 2-core box, as much as everything else the gateway does for a request's spans
(docs/observability.md). Here the same message is written straight to protobuf's wire format,
which is simple for what a span holds (varints, fixed 64-bit numbers, length-prefixed bytes): the
spans' ids, names, times, kind, status, flags, attributes (str, bool, int, float, bytes,
sequences and mappings of them) and events. The resource and instrumentation scope of a batch
are encoded once by the OTLP encoder itself and reused. Links, and any value the encoder would
refuse, are left to the OTLP encoder (`encode` returns None); so is everything the exporter does
with the bytes (compression, retries, the HTTP or gRPC call): `span_exporter` is the OTLP
exporter of either protocol, fed by this encoder.

The field numbers are opentelemetry-proto's (trace/v1/trace.proto, common/v1/common.proto);
tests/server/test_otlp.py decodes what this writes with opentelemetry-proto and holds it equal
to the OTLP encoder's message for the same spans.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GRPCExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HTTPExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

from gateway.core.tracing import Recording

__all__ = ["Batches", "encode", "span_exporter"]

log = logging.getLogger(__name__)

_DOUBLE = struct.Struct("<d").pack
_FIXED64 = struct.Struct("<Q").pack
_SMALL = [bytes((n,)) for n in range(128)]  # a varint under 128 is its own byte

# Span.kind: the API's SpanKind (INTERNAL = 0 …) is one less than the proto's (SPAN_KIND_INTERNAL = 1 …).
_KIND = {kind: _SMALL[kind.value + 1] for kind in SpanKind}
_NO_PARENT_FLAGS = b"\x85\x01" + struct.pack("<I", 0x100)  # Span.flags (16, fixed32): HAS_IS_REMOTE
_REMOTE_PARENT_FLAGS = b"\x85\x01" + struct.pack("<I", 0x300)  # … and IS_REMOTE


class _Unsupported(Exception):
    """A span this module leaves to the OTLP encoder."""


def _varint(n: int) -> bytes:
    if n < 128:
        return _SMALL[n] if n >= 0 else _varint(n + (1 << 64))  # a negative int64: two's complement
    out = bytearray()
    while n > 127:
        out.append((n & 127) | 128)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, its payload's length, its payload."""
    return tag + _varint(len(payload)) + payload


def _value(value: Any) -> bytes:
    """An AnyValue's bytes, in the OTLP encoder's order of checks. A oneof member is written
    even at its default (false, 0, "")."""
    kind = type(value)  # the usual types first, by identity
    if kind is str:
        return _field(b"\x0a", value.encode())  # string_value = 1
    if kind is float:
        return b"\x21" + _DOUBLE(value)  # double_value = 4
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"  # bool_value = 2
    if isinstance(value, str):
        return _field(b"\x0a", str.encode(value))
    if isinstance(value, int):
        if not -(1 << 63) <= value < 1 << 63:
            raise _Unsupported("an int beyond int64")
        return b"\x18" + _varint(int(value))  # int_value = 3
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)  # bytes_value = 7
    if isinstance(value, Sequence):  # array_value = 5: ArrayValue { repeated AnyValue values = 1 }
        return _field(b"\x2a", b"".join(_field(b"\x0a", _value(item)) for item in value))
    if isinstance(value, Mapping):  # kvlist_value = 6: KeyValueList { repeated KeyValue values = 1 }
        return _field(b"\x32", b"".join(_field(b"\x0a", _key_value(str(k), v)) for k, v in value.items()))
    raise _Unsupported(f"an attribute value of type {kind.__name__}")


def _key_value(key: str, value: Any) -> bytes:
    """KeyValue { string key = 1; AnyValue value = 2 }."""
    return _field(b"\x0a", key.encode()) + _field(b"\x12", _value(value))


_KNOWN_MAX = 4096
_keys: dict[str, bytes] = {}  # KeyValue's key field, by key (a few dozen names)


def _key_field(key: str) -> bytes:
    key_field = _keys.get(key)
    if key_field is None:
        if len(_keys) >= _KNOWN_MAX:
            _keys.clear()
        key_field = _keys[key] = _field(b"\x0a", key.encode())
    return key_field


def _fresh(tag: bytes, key: str, kind: type, value: Any) -> bytes:
    """One attribute's field, with a float, str or int value (the usual ones: a time, an id, a
    count) written inline; anything else by `_key_value`."""
    if kind is float:
        value_field = b"\x12\x09\x21" + _DOUBLE(value)  # AnyValue { double_value = 4 }, 9 bytes
    elif kind is str:
        text = value.encode()
        any_value = b"\x0a" + _varint(len(text)) + text
        value_field = b"\x12" + _varint(len(any_value)) + any_value
    elif kind is int and 0 <= value < 1 << 63:
        any_value = b"\x18" + _varint(value)  # int_value = 3
        value_field = b"\x12" + _SMALL[len(any_value)] + any_value
    else:
        return _field(tag, _key_value(key, value))
    key_field = _key_field(key)
    return tag + _varint(len(key_field) + len(value_field)) + key_field + value_field


# An attribute's bytes in a span (the field's tag and length, then KeyValue's) by its tag, its key
# and its str or int value, for the values that repeat across spans (the model, the API, a status
# code, a finish reason). A key with more values than a few hundred is one whose values do not
# repeat (an id, a count): it is marked None and its values are written each time.
_known: dict[bytes, dict[str, dict[Any, bytes] | None]] = {}
_VALUES_MAX = 256
_floats: dict[bytes, dict[str, bytes]] = {}  # a float attribute's field up to its value, by tag and key
_NEW: dict[Any, bytes] = {}


def _attributes(tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
    if not attributes:
        return b""
    known = _known.get(tag)
    if known is None or len(known) >= _KNOWN_MAX:
        known = _known[tag] = {}
    floats = _floats.get(tag)
    if floats is None or len(floats) >= _KNOWN_MAX:
        floats = _floats[tag] = {}
    out = []
    for key, value in attributes.items():
        kind = type(value)
        if kind is float:  # a time: everything before its 8 bytes is the key's
            prefix = floats.get(key)
            if prefix is None:
                prefix = floats[key] = _fresh(tag, key, kind, 0.0)[:-8]
            out.append(prefix + _DOUBLE(value))
            continue
        if kind is str or kind is int:  # exactly: a bool is neither, and 1 is not "1"
            values = known.get(key, _NEW)
            if values is not None:
                if values is _NEW:
                    values = known[key] = {}
                field = values.get(value)
                if field is None:
                    if len(values) >= _VALUES_MAX:
                        known[key] = None
                    else:
                        field = values[value] = _fresh(tag, key, kind, value)
                if field is not None:
                    out.append(field)
                    continue
        out.append(_fresh(tag, key, kind, value))
    return b"".join(out)


_names: dict[tuple[str, SpanKind], bytes] = {}  # a span's name and kind fields (5, 6), by both (a few)
_NO_STATUS = _field(b"\x7a", b"")  # Status {}: the span's status is unset


def _span(span: ReadableSpan) -> bytes:
    """Span's bytes (trace.proto's field numbers in the comments)."""
    ids, parent = span.context, span.parent
    assert ids is not None
    out = [b"\x0a\x10", ids.trace_id.to_bytes(16, "big"), b"\x12\x08", ids.span_id.to_bytes(8, "big")]  # 1, 2
    if ids.trace_state:  # 3
        out.append(_field(b"\x1a", ",".join(f"{key}={value}" for key, value in ids.trace_state.items()).encode()))
    if parent is not None:  # parent_span_id = 4
        out += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
    named = _names.get((span.name, span.kind))
    if named is None:
        if len(_names) >= _KNOWN_MAX:
            _names.clear()
        named = _names[span.name, span.kind] = (_field(b"\x2a", span.name.encode()) if span.name else b"") \
            + b"\x30" + _KIND[span.kind]
    out.append(named)
    if span.start_time:  # 7
        out += (b"\x39", _FIXED64(span.start_time))
    if span.end_time:  # 8
        out += (b"\x41", _FIXED64(span.end_time))
    # 9: a Recording's own dict (gateway/core/tracing.py), not the read-only view ReadableSpan makes of it
    out.append(_attributes(b"\x4a", span._attributes if type(span) is Recording else span.attributes))
    if span.dropped_attributes:  # 10
        out += (b"\x50", _varint(span.dropped_attributes))
    for event in span.events:  # 11: Event { time_unix_nano = 1; name = 2; attributes = 3; dropped = 4 }
        body = b"\x09" + _FIXED64(event.timestamp) if event.timestamp else b""
        body += (_field(b"\x12", event.name.encode()) if event.name else b"") + _attributes(b"\x1a", event.attributes)
        if event.dropped_attributes:
            body += b"\x20" + _varint(event.dropped_attributes)
        out.append(_field(b"\x5a", body))
    if span.dropped_events:  # 12
        out += (b"\x60", _varint(span.dropped_events))
    if span.links or span.dropped_links:  # 13, 14
        raise _Unsupported("links")
    status = span.status  # 15: Status { message = 2; code = 3 }, always there as the OTLP encoder writes it
    if status.status_code is StatusCode.UNSET and not status.description:
        out.append(_NO_STATUS)
    else:
        body = _field(b"\x12", status.description.encode()) if status.description else b""
        if status.status_code.value:
            body += b"\x18" + _varint(status.status_code.value)
        out.append(_field(b"\x7a", body))
    out.append(_REMOTE_PARENT_FLAGS if parent is not None and parent.is_remote else _NO_PARENT_FLAGS)  # 16
    return b"".join(out)


# What the OTLP encoder writes for a resource and for a scope (the message's bytes, then its
# schema_url field's), by the object's id, with the object kept so that the id stays its own.
_encoded: dict[int, tuple[Any, bytes, bytes]] = {}


def _encoded_once(thing: Any, span: ReadableSpan, resource: bool) -> tuple[bytes, bytes]:
    """`thing`, `span`'s resource or scope, as the OTLP encoder writes it in `span`'s message."""
    known = _encoded.get(id(thing))
    if known is None or known[0] is not thing:
        [resource_spans] = encode_spans([span]).resource_spans
        message = resource_spans if resource else resource_spans.scope_spans[0]
        body = (message.resource if resource else message.scope).SerializeToString()
        schema = _field(b"\x1a", message.schema_url.encode()) if message.schema_url else b""  # schema_url = 3
        if len(_encoded) > 64:  # resources and scopes come and go only in tests
            _encoded.clear()
        known = _encoded[id(thing)] = (thing, body, schema)
    return known[1], known[2]


def encode(spans: Sequence[ReadableSpan]) -> bytes | None:
    """ExportTraceServiceRequest's bytes for `spans`, grouped by resource, then scope, as the
    OTLP encoder groups them; None when one of them holds what only that encoder writes."""
    groups: dict[int, tuple[ReadableSpan, dict[int, tuple[ReadableSpan, list[bytes]]]]] = {}
    try:
        for span in spans:
            resource, scope = id(span.resource), id(span.instrumentation_scope)
            if resource not in groups:
                groups[resource] = (span, {})
            scopes = groups[resource][1]
            if scope not in scopes:
                scopes[scope] = (span, [])
            scopes[scope][1].append(_field(b"\x12", _span(span)))  # ScopeSpans.spans = 2
    except _Unsupported:
        return None
    out = []
    for first, scopes in groups.values():
        scope_spans = []
        for of_scope, encoded in scopes.values():
            scope, schema = _encoded_once(of_scope.instrumentation_scope, of_scope, resource=False)
            # ResourceSpans.scope_spans = 2: ScopeSpans { scope = 1; spans = 2; schema_url = 3 }
            scope_spans.append(_field(b"\x12", _field(b"\x0a", scope) + b"".join(encoded) + schema))
        resource, schema = _encoded_once(first.resource, first, resource=True)
        # ExportTraceServiceRequest.resource_spans = 1: ResourceSpans { resource = 1; scope_spans = 2; schema_url = 3 }
        out.append(_field(b"\x0a", _field(b"\x0a", resource) + b"".join(scope_spans) + schema))
    return b"".join(out)


class _HTTP(HTTPExporter):
    """OTLP/HTTP (protobuf) with `encode`'s bytes; the stock path for anything else (a batch
    `encode` leaves to the OTLP encoder, one over the size limit, an SDK without these parts)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        client, limit, metrics = (getattr(self, name, None) for name in ("_client", "_max_request_size", "_metrics"))
        encoded = encode(spans) if None not in (client, limit, metrics) and not self._shutdown else None
        if encoded is None or 0 < limit < len(encoded):  # type: ignore[operator]
            return super().export(spans)
        with metrics.export_operation(len(spans)) as result:  # type: ignore[union-attr]
            sent = client.export(encoded)  # type: ignore[union-attr]
            if not sent.success:
                result.error = sent.error
                if sent.status_code is not None:
                    result.error_attrs = {"http.response.status_code": sent.status_code}
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS


class _GRPC(GRPCExporter):
    """OTLP/gRPC with `encode`'s bytes, read back into the message the gRPC stub sends."""

    def _translate_data(self, data: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
        encoded = encode(data)
        return super()._translate_data(data) if encoded is None else ExportTraceServiceRequest.FromString(encoded)


def span_exporter(protocol: str, endpoint: str | None) -> SpanExporter:
    """The OTLP exporter for `protocol` ("grpc" or "http/protobuf"), to `endpoint` as given
    (None: the exporter's own from the environment)."""
    kind = _GRPC if protocol == "grpc" else _HTTP
    return kind(endpoint=endpoint) if endpoint else kind()


class Batches(SpanProcessor):
    """The SDK's batch span processor, as the OTEL_BSP_* variables set it (a batch of at most
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE spans exported from one thread as soon as one is full, or every
    OTEL_BSP_SCHEDULE_DELAY ms; past OTEL_BSP_MAX_QUEUE_SIZE waiting, the oldest are dropped),
    less what it costs the request that ends a span: a span is appended to a deque, no more (the
    SDK's checks its process id, a system call, on every span)."""

    def __init__(self, exporter: SpanExporter, environ: Mapping[str, str] = os.environ) -> None:
        self._exporter = exporter
        self._delay = _setting(environ, "OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self._batch = _setting(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
        self._queue: deque[ReadableSpan] = deque(maxlen=max(self._batch, _setting(environ, "OTEL_BSP_MAX_QUEUE_SIZE", 2048)))
        self._wake = threading.Event()
        self._exporting = threading.Lock()  # one export at a time: the thread's, or a flush's
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="span-export", daemon=True)
        self._thread.start()

    def on_end(self, span: ReadableSpan) -> None:
        if type(span) is Recording:  # the gateway's own: its flag, not two properties' calls
            if not span.sampled or self._stopping:
                return
        elif (ids := span.context) is None or not ids.trace_flags.sampled or self._stopping:
            return
        queue = self._queue
        queue.append(span)
        if len(queue) >= self._batch and not self._wake.is_set():
            self._wake.set()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._delay)
            self._wake.clear()
            self._export(everything=False)
        self._export(everything=True)

    def _export(self, everything: bool) -> None:
        """A batch of what waits (all of it, batch by batch, when `everything`), then the next
        while a whole one waits."""
        queue = self._queue
        with self._exporting:
            while queue:
                batch = [queue.popleft() for _ in range(min(len(queue), self._batch))]
                try:
                    self._exporter.export(batch)
                except Exception:  # an exporter's failure loses its batch, never the thread
                    log.exception("exporting %d spans failed", len(batch))
                if not everything and len(queue) < self._batch:
                    return

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._export(everything=True)
        return True

    def shutdown(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        self._wake.set()
        self._thread.join(30)
        self._exporter.shutdown()


def _setting(environ: Mapping[str, str], name: str, default: int) -> int:
    """A positive whole OTEL_BSP_* value, or its default (as the SDK reads them)."""
    value = environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        log.warning("%s=%r is not a positive number: using %d", name, value, default)
        return default
    return number
