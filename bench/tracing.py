"""What traces cost the gateway: CPU per request and per token, traces off against on.

`python -m bench.tracing [--pairs 4] [--requests 300]`: a fresh gateway per side and per
stream length, pinned to its own core, serves sequential streamed Responses requests from the
instant token server (16-token and 1,016-token answers); its CPU time over the timed requests
(after a warm-up) divided by their count is the CPU per request, and the difference between
the long and the short answers' per 1,000 tokens the CPU per token. "On" exports every span by
OTLP/HTTP to a sink in this process (`--otlp-traces-endpoint`: the SDK's batch exporter runs in
the gateway, so its cost is counted); the sink counts the spans it got. `--ratio R` adds a
third side: on, with OTEL_TRACES_SAMPLER=traceidratio (a fraction R of the requests traced);
`--before DIR` another: the gateway from DIR, a checkout of the code before traces existed
(`git archive COMMIT | tar -x -C DIR`), to hold "off" against it.
Sides are interleaved (off, on, …, then the reverse order) so the shared machine's drift hits
them alike; every run is printed.

`--profile FILE`: py-spy (`pip install py-spy`) samples each "on" gateway over its timed short
requests; the stacks are written to FILE (py-spy's raw format, merged over the runs) and the
share of samples in OpenTelemetry's code, by its outermost function, is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
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
        def do_POST(self) -> None:
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


# The batch exporter's delay in every gateway measured (all sides alike), and the wait after the
# warm-up and after the timed requests: past it, every span of the warm-up was exported before
# the timed window and every span of the window within it, so the window's CPU is its own
# spans' whole cost (made, encoded, sent) and nothing else's.
EXPORT_DELAY_MS = 500
SETTLE_S = 3 * EXPORT_DELAY_MS / 1000


def _cpu_ms_per_request(upstream: procs.Process, body: str, requests: int, extra: list[str],
                        profile: Path | None = None) -> tuple[float, float]:
    """(gateway CPU ms per request, output tokens per request) over `requests` after a warm-up;
    `profile`: py-spy's stacks of the gateway over them are appended there."""
    model = qwen()
    with procs.gateway(upstream.url, str(model.model_dir), model.chat_format, extra=extra) as gateway:
        _measure(gateway.port, "/v1/responses", body, GATEWAY_MARKER, max(5, requests // 10), 100_000, "words")
        time.sleep(SETTLE_S)
        with _sampled(gateway.pid, profile):
            before = gateway.cpu_seconds()
            done = _measure(gateway.port, "/v1/responses", body, GATEWAY_MARKER, requests, 200_000, "words")
            time.sleep(SETTLE_S)
            cpu = gateway.cpu_seconds() - before
    return cpu * 1000 / len(done), statistics.mean(r["tokens"] for r in done)


@contextmanager
def _sampled(pid: int, profile: Path | None) -> Iterator[None]:
    """py-spy recording `pid` (its stacks in raw form, appended to `profile`) around the block."""
    if profile is None:
        yield
        return
    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid),
                                "--rate", "250", "--format", "raw", "--full-filenames", "--output", out.name],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            yield
        finally:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
            with profile.open("a") as merged:
                merged.write(Path(out.name).read_text())


_WAITING = ("Condition.wait ", "Event.wait ", "EpollSelector.select ", "select ")  # a thread asleep, not working


def profile_summary(profile: Path, top: int = 12) -> dict[str, Any]:
    """The share of the working samples (not asleep on a lock or in select) in OpenTelemetry's
    code, by its outermost function there."""
    total, by_entry = 0, Counter()
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit() or stack.rpartition(";")[2].startswith(_WAITING):
            continue
        total += int(count)
        entry = next((frame for frame in stack.split(";") if "/opentelemetry/" in frame), None)
        if entry is not None:
            name, _, where = entry.partition(" (")
            by_entry[f"{name} ({where.split('site-packages/')[-1].rpartition(':')[0]})"] += int(count)
    otel = sum(by_entry.values())
    return {"samples": total, "opentelemetry_share": round(otel / total, 3) if total else None,
            "by_entry": [(entry, round(n / total, 3)) for entry, n in by_entry.most_common(top)]}


def side(state: str, ratio: float, short: procs.Process, long: procs.Process, sink: dict[str, Any],
         requests: int, profile: Path | None = None) -> dict:
    """One run of `state`: "off", "on" (every request traced) or "sampled" (a `ratio` of them)."""
    extra = ["--otlp-traces-endpoint", sink["endpoint"]] if state in ("on", "sampled") else []
    sampler = {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": str(ratio)} if state == "sampled" else {}
    sampler["OTEL_BSP_SCHEDULE_DELAY"] = str(EXPORT_DELAY_MS)
    saved = {key: os.environ.get(key) for key in sampler}
    os.environ.update(sampler)  # the gateway inherits it
    root = procs.ROOT
    if state == "before":
        procs.ROOT = BEFORE  # the gateway process runs that checkout (its cwd and PYTHONPATH)
    model = qwen()
    body, _ = _bodies(str(model.model_dir), model.name, tagged=True)
    spans = sink["spans"]
    try:
        short_ms, short_tokens = _cpu_ms_per_request(short, body, requests, extra, profile if state == "on" else None)
        long_ms, long_tokens = _cpu_ms_per_request(long, body, max(20, requests // 5), extra)
    finally:
        procs.ROOT = root
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return {"traces": state, "cpu_ms_per_request": round(short_ms, 3),
            "cpu_us_per_token": round((long_ms - short_ms) * 1000 / (long_tokens - short_tokens), 2),
            "tokens": [short_tokens, long_tokens], "spans_exported": sink["spans"] - spans}


BEFORE = Path()


def run(pairs: int, requests: int, ratio: float | None, before: Path | None = None,
        profile: Path | None = None) -> dict[str, Any]:
    global BEFORE
    model = qwen()
    states = (["before"] if before else []) + ["off", "on"] + (["sampled"] if ratio is not None else [])
    BEFORE = before or Path()
    rows = []
    with procs.token_server(model.name, model.output(SHORT - 1)) as short, \
            procs.token_server(model.name, model.output(LONG - 1)) as long, otlp_sink() as sink:
        for i in range(pairs):
            for state in (states if i % 2 == 0 else states[::-1]):
                rows.append(side(state, ratio or 0.0, short, long, sink, requests, profile))
                print(json.dumps(rows[-1]), flush=True)
    summary = {}
    for state in states:
        mine = [r for r in rows if r["traces"] == state]
        summary[state] = {key: {"median": statistics.median(r[key] for r in mine),
                                "all": [r[key] for r in mine]}
                          for key in ("cpu_ms_per_request", "cpu_us_per_token")}
    return {"machine": machine.describe(), "pairs": pairs, "requests": requests, "ratio": ratio, "rows": rows,
            "summary": summary}


def span_cost(iterations: int = 2000) -> dict[str, float]:
    """CPU µs per request of the spans alone, in this process: one request's spans (the
    request's and its generation's, with the gateway's attribute sets and its phases timed)
    made through gateway/core/tracing.py and exported by OTLP/HTTP to the sink, timed by process
    CPU time (the exporter's thread included, flushed at the end)."""

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import SpanKind

    from gateway.core import tracing

    headers = [(b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]
    with otlp_sink() as sink:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=sink["endpoint"]), max_queue_size=65536))
        tracing.use(provider)
        try:
            start = time.process_time()
            for i in range(iterations):
                opened = tracing.start_request("POST /v1/responses", headers,
                                               {"gateway.api": "responses_http", "gateway.request_id": f"req_{i}"})
                assert opened is not None
                with tracing.phase("gateway.prepare"):
                    pass
                with tracing.phase("gateway.render"):
                    pass
                generation = tracing.start_span("chat tiny-qwen3", SpanKind.CLIENT)
                assert generation is not None
                generation.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": "tiny-qwen3",
                                           "gen_ai.request.temperature": 0.0, "gen_ai.request.max_tokens": 16})
                with tracing.current(generation):
                    tracing.upstream_headers()
                tracing.end(generation, {"gen_ai.usage.output_tokens": 16, "gen_ai.response.id": f"gw_{i}",
                                         "gen_ai.usage.input_tokens": 12, "gen_ai.response.finish_reasons": ["stop"],
                                         "gen_ai.latency.time_to_first_token": 0.001, "server.address": "127.0.0.1",
                                         "server.port": 8000})
                with tracing.phase("gateway.commit"):
                    pass
                tracing.end_request(opened, {"gateway.outcome": "completed", "http.response.status_code": 200,
                                             "gen_ai.response.id": f"resp_{i}", "gen_ai.request.model": "tiny-qwen3",
                                             "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 16})
            provider.force_flush()
            cpu = time.process_time() - start
        finally:
            tracing.shutdown()
        return {"us_per_request": round(cpu / iterations * 1e6, 1), "spans_exported": sink["spans"]}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--requests", type=int, default=300, help="short requests per side (long: a fifth)")
    parser.add_argument("--ratio", type=float, help="also measure traces on with this fraction sampled")
    parser.add_argument("--spans-only", action="store_true", help="only the spans' own CPU per request, in process")
    parser.add_argument("--before", type=Path, help="a checkout of the code before traces, measured as a side too")
    parser.add_argument("--profile", type=Path, help="py-spy's stacks of the traced gateways, written here")
    args = parser.parse_args()
    if args.spans_only:
        print(json.dumps([span_cost() for _ in range(5)]))
        return
    if args.profile is not None:
        args.profile.write_text("")
    print(json.dumps(run(args.pairs, args.requests, args.ratio, args.before, args.profile)["summary"], indent=1))
    if args.profile is not None:
        print(json.dumps(profile_summary(args.profile), indent=1))


if __name__ == "__main__":
    main()
