"""A real OTLP trace receiver on loopback, as a collector would be: OTLP/HTTP (protobuf, POST
/v1/traces) or OTLP/gRPC (TraceService/Export), decoded with opentelemetry-proto.

    with otlp_receiver("http/protobuf") as receiver:
        ...  # export to receiver.endpoint
        span = receiver.wait_for(lambda s: s.name == "POST /v1/responses")
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.waiting import wait_for


@dataclass
class ReceivedSpan:
    service: str  # the exporting process's resource service.name
    name: str
    trace_id: str  # hex, as in a traceparent
    span_id: str
    parent_span_id: str  # "" for a root span
    kind: int  # the proto's SpanKind (2: server, 3: client)
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int


@dataclass
class Receiver:
    endpoint: str = ""
    requests: int = 0  # export requests received
    spans: list[ReceivedSpan] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        received = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(ReceivedSpan(
                        str(resource.get("service.name", "")), span.name, span.trace_id.hex(), span.span_id.hex(),
                        span.parent_span_id.hex(), span.kind, {a.key: _value(a.value) for a in span.attributes},
                        span.start_time_unix_nano, span.end_time_unix_nano))
        with self._lock:
            self.requests += 1
            self.spans.extend(received)

    def wait_for(self, match: Callable[[ReceivedSpan], bool], timeout: float = 60.0) -> ReceivedSpan:
        """The first span received that matches, once one has been (spans come in batches)."""
        wait_for(lambda: any(match(s) for s in list(self.spans)), timeout=timeout)
        return next(s for s in list(self.spans) if match(s))


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind is not None else None


@contextmanager
def otlp_receiver(protocol: str = "http/protobuf") -> Iterator[Receiver]:
    receiver = Receiver()
    if protocol == "grpc":
        yield from _grpc(receiver)
    else:
        yield from _http(receiver)


def _http(receiver: Receiver) -> Iterator[Receiver]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces" or self.headers.get("content-type") != "application/x-protobuf":
                self.send_response(404)
                self.end_headers()
                return
            receiver.take(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    receiver.endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def _grpc(receiver: Receiver) -> Iterator[Receiver]:
    import grpc

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            receiver.take(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    receiver.endpoint = f"http://127.0.0.1:{port}"
    try:
        yield receiver
    finally:
        server.stop(grace=None)
