"""What traces cost the gateway: CPU per request and per token, traces off against on.

`python -m bench.tracing [--pairs 4] [--requests 300]`: a fresh gateway per side and per
stream length, pinned to its own core, serves sequential streamed Responses requests from the
instant token server (16-token and 1,016-token answers); its CPU time over the timed requests
(after a warm-up) divided by their count is the CPU per request, and the difference between
the long and the short answers' per 1,000 tokens the CPU per token. "On" exports every span by
OTLP/HTTP to a sink in this process (`--otlp-traces-endpoint`: the SDK's batch exporter runs in
the gateway, so its cost is counted); the sink counts the spans it got. Sides are interleaved
(off, on, on, off, …) so the shared machine's drift hits both alike; every pair is printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bench import machine, procs
from bench.latency import GATEWAY_MARKER, _bodies, _measure
from bench.models import qwen

SHORT, LONG = 16, 1016  # output tokens per answer


@contextmanager
def otlp_sink() -> Iterator[dict[str, Any]]:
    """An OTLP/HTTP trace endpoint that counts the spans it receives."""
    seen = {"endpoint": "", "spans": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            request = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["content-length"])))
            seen["spans"] += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    seen["endpoint"] = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()


def _cpu_ms_per_request(upstream: procs.Process, body: str, requests: int, extra: list[str]) -> tuple[float, float]:
    """(gateway CPU ms per request, output tokens per request) over `requests` after a warm-up."""
    model = qwen()
    with procs.gateway(upstream.url, str(model.model_dir), model.chat_format, extra=extra) as gateway:
        _measure(gateway.port, "/v1/responses", body, GATEWAY_MARKER, max(5, requests // 10), 100_000, "words")
        before = gateway.cpu_seconds()
        done = _measure(gateway.port, "/v1/responses", body, GATEWAY_MARKER, requests, 200_000, "words")
        cpu = gateway.cpu_seconds() - before
    return cpu * 1000 / len(done), statistics.mean(r["tokens"] for r in done)


def side(traced: bool, short: procs.Process, long: procs.Process, sink: dict[str, Any], requests: int) -> dict:
    extra = ["--otlp-traces-endpoint", sink["endpoint"]] if traced else []
    model = qwen()
    body, _ = _bodies(str(model.model_dir), model.name, tagged=True)
    spans = sink["spans"]
    short_ms, short_tokens = _cpu_ms_per_request(short, body, requests, extra)
    long_ms, long_tokens = _cpu_ms_per_request(long, body, max(20, requests // 5), extra)
    return {"traces": "on" if traced else "off", "cpu_ms_per_request": round(short_ms, 3),
            "cpu_us_per_token": round((long_ms - short_ms) * 1000 / (long_tokens - short_tokens), 2),
            "tokens": [short_tokens, long_tokens], "spans_exported": sink["spans"] - spans}


def run(pairs: int, requests: int) -> dict[str, Any]:
    model = qwen()
    rows = []
    with procs.token_server(model.name, model.output(SHORT - 1)) as short, \
            procs.token_server(model.name, model.output(LONG - 1)) as long, otlp_sink() as sink:
        for i in range(pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            for traced in order:
                rows.append(side(traced, short, long, sink, requests))
                print(json.dumps(rows[-1]), flush=True)
    summary = {}
    for state in ("off", "on"):
        mine = [r for r in rows if r["traces"] == state]
        summary[state] = {key: {"median": statistics.median(r[key] for r in mine),
                                "all": [r[key] for r in mine]}
                          for key in ("cpu_ms_per_request", "cpu_us_per_token")}
    return {"machine": machine.describe(), "pairs": pairs, "requests": requests, "rows": rows, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--requests", type=int, default=300, help="short requests per side (long: a fifth)")
    args = parser.parse_args()
    print(json.dumps(run(args.pairs, args.requests)["summary"], indent=1))


if __name__ == "__main__":
    main()
