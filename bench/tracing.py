"""What traces cost the gateway: CPU per request and per token, traces off against on.

`python -m bench.tracing [--rounds 5] [--requests 600]`: each round starts a gateway per side,
all pinned to one core, in front of the instant token server (16-token answers); they serve
sequential streamed Responses requests in blocks taken in turn (the order reversed every block,
and every round), so the shared machine's drift hits every side alike. A gateway's CPU time
(its /proc stat: every thread, the batch exporter's included) from a settled start to a settled
end (EXPORT_DELAY_MS) over its requests is its CPU per request, split by the scheduler's
count of each thread's time into its event loop's thread and the others (the batch exporter's,
and those an untraced gateway runs too); the same again against
1,016-token answers gives the CPU per token (the difference per 1,000 tokens). "On" exports
every span by OTLP/HTTP to a sink in this process (`--otlp-traces-endpoint`); the sink counts
the spans it got. Reported per side: min / median / max over the rounds, and each round's
traced side over its own "off" side. `--ratio R` adds a side: on, with
OTEL_TRACES_SAMPLER=traceidratio (a fraction R of the requests traced); `--old DIR` one: the
gateway from DIR (`git archive COMMIT | tar -x -C DIR`), traced, to hold a change against
the code before it; `--before DIR` one: the gateway from DIR without traces (a checkout from
before traces existed, to hold "off" against it).

`--helpers`: one round of "off", "on" and a third gateway, traced, run by bench/timed_gateway.py
(each tracing helper timed by the CPU clock of its thread): each helper's CPU per call and per
request, as it runs among the requests' other code.

`--profile FILE`: py-spy (`pip install py-spy`) samples each "on" gateway over its timed short
requests; the stacks are written to FILE (py-spy's raw format, merged over the runs) and the
share of samples in the tracing code (OpenTelemetry's and the gateway's tracing modules), by
its outermost function there, is printed.
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
from contextlib import ExitStack, contextmanager
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
        protocol_version = "HTTP/1.1"  # keeps the exporter's connection open, as a collector does

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
# spans' whole cost (made, encoded, sent) and nothing else's. Under 5 s (the SDK's default) to
# keep the waits short, long enough that a traced gateway's batches are about as full as the
# default's under load (512 spans, or a block's 400).
EXPORT_DELAY_MS = 2000
SETTLE_S = 1.5 * EXPORT_DELAY_MS / 1000


@contextmanager
def _gateways(states: list[str], upstream: procs.Process, sink: dict[str, Any], ratio: float,
              code: dict[str, Path]) -> Iterator[dict[str, procs.Process]]:
    """A gateway per side, all up at once: "off", "on" (every request traced), "sampled" (a
    `ratio` of them), "old" (traced, the code from code["old"]), "before" (the code from
    code["before"], no traces), "timed" (traced, its helpers timed into the file code["timed"])."""
    model = qwen()
    with ExitStack() as stack:
        gateways = {}
        for state in states:
            traced = state in ("on", "sampled", "old", "timed")
            extra = ["--otlp-traces-endpoint", sink["endpoint"]] if traced else []
            env = {"OTEL_BSP_SCHEDULE_DELAY": str(EXPORT_DELAY_MS)}
            if state == "timed":
                env["TIMED_GATEWAY_OUT"] = str(code["timed"])
            if state == "sampled":
                env |= {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": str(ratio)}
            saved, root = {key: os.environ.get(key) for key in env}, procs.ROOT
            os.environ.update(env)  # the gateway inherits it
            procs.ROOT = code[state] if state in ("old", "before") else root  # that checkout (its cwd and PYTHONPATH)
            try:
                gateways[state] = stack.enter_context(
                    procs.gateway(upstream.url, str(model.model_dir), model.chat_format, extra=extra,
                                  module="bench.timed_gateway" if state == "timed" else "gateway"))
            finally:
                procs.ROOT = root
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
        yield gateways


def _round(states: list[str], upstream: procs.Process, requests: int, blocks: int, sink: dict[str, Any],
           ratio: float, code: dict[str, Path], profile: Path | None = None) -> dict[str, tuple[float, float, float]]:
    """Side → (gateway CPU ms per request, output tokens per request, the share of that CPU
    time its event loop's thread spent, by the scheduler's count): the sides' gateways serve
    `requests` each in `blocks` taken in turn (the order reversed every block), so the shared
    machine's drift hits them alike; each one's CPU is read from a settled start to a settled end.
    `profile`: py-spy's stacks of the "on" (and "old") gateway over it are appended there
    (`_profile_of`)."""
    model = qwen()
    body, _ = _bodies(str(model.model_dir), model.name, tagged=True)
    done: dict[str, list[dict]] = {state: [] for state in states}
    with _gateways(states, upstream, sink, ratio, code) as gateways:
        for gateway in gateways.values():
            _measure(gateway.port, "/v1/responses", body, GATEWAY_MARKER, max(5, requests // 10), 100_000, "words")
        time.sleep(SETTLE_S)
        with ExitStack() as sampling:
            for state in ("on", "old"):
                if profile is not None and state in gateways:
                    sampling.enter_context(_sampled(gateways[state].pid, _profile_of(profile, state)))
            before = {state: gateway.cpu_seconds() for state, gateway in gateways.items()}
            threads = {state: gateway.thread_cpu_ns() for state, gateway in gateways.items()}
            for block in range(blocks):
                for state in (states if block % 2 == 0 else states[::-1]):
                    done[state] += _measure(gateways[state].port, "/v1/responses", body, GATEWAY_MARKER,
                                            requests // blocks, 200_000 + block * requests, "words")
            time.sleep(SETTLE_S)
            cpu = {state: gateway.cpu_seconds() - before[state] for state, gateway in gateways.items()}
            loop = {state: _loop_share(gateway, threads[state]) for state, gateway in gateways.items()}
    return {state: (cpu[state] * 1000 / len(done[state]), statistics.mean(r["tokens"] for r in done[state]), loop[state])
            for state in states}


def _loop_share(gateway: procs.Process, before: dict[int, int]) -> float:
    """The share of the gateway's CPU time since `before` spent on its event loop's thread (the
    rest: the batch exporter's thread, and whatever others it runs, the same in every side)."""
    after = gateway.thread_cpu_ns()
    spent = {tid: ns - before.get(tid, 0) for tid, ns in after.items()}
    return spent.get(gateway.pid, 0) / max(1, sum(spent.values()))


def _profile_of(profile: Path, state: str) -> Path:
    """Where the stacks of `state`'s gateway go: "on" in `profile`, another beside it."""
    return profile if state == "on" else profile.with_name(f"{profile.stem}-{state}{profile.suffix}")


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
# What the batch exporter's thread spends its samples on, by a frame its stack holds.
_EXPORT_WORK = (("encoding (the OTLP encoder)", ("encode_spans ",)), ("encoding (gateway/server/otlp.py)", ("encode (",)),
                ("the HTTP or gRPC call", ("/requests/", "/urllib3/", "/grpc/", "http/client.py")))
# The code traces run: OpenTelemetry's, and the gateway's own tracing modules.
_TRACING = ("/opentelemetry/", "gateway/core/tracing.py", "gateway/pipeline/_spans.py", "gateway/server/otlp.py")


def profile_summary(profile: Path, top: int = 12) -> dict[str, Any]:
    """The share of the working samples (not asleep on a lock or in select) in the tracing
    code (OpenTelemetry's and the gateway's tracing modules), by its outermost function there."""
    total, by_entry = 0, Counter()
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit() or stack.rpartition(";")[2].startswith(_WAITING):
            continue
        total += int(count)
        entry = next((frame for frame in stack.split(";") if any(part in frame for part in _TRACING)), None)
        if entry is not None and entry.startswith(("BatchProcessor.worker ", "Batches._run ")):  # the export thread
            work = next((label for label, marks in _EXPORT_WORK if any(mark in stack for mark in marks)), "other")
            by_entry[f"export thread: {work}"] += int(count)
        elif entry is not None:
            name, _, where = entry.partition(" (")
            where = where.split("site-packages/")[-1].rpartition(":")[0]
            by_entry[f"{name} ({where[where.find('gateway/'):] if 'site-packages' not in entry else where})"] += int(count)
    traced = sum(by_entry.values())
    return {"samples": total, "tracing_share": round(traced / total, 3) if total else None,
            "by_entry": [(entry, round(n / total, 3)) for entry, n in by_entry.most_common(top)]}


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 4), "median": round(statistics.median(values), 4), "max": round(max(values), 4)}


def run(rounds: int, requests: int, ratio: float | None, before: Path | None = None, old: Path | None = None,
        profile: Path | None = None, blocks: int = 6) -> dict[str, Any]:
    """`rounds` rounds, each a fresh gateway per side for short answers (CPU per request) and
    another for long ones (CPU per token: the difference per 1,000 tokens)."""
    model = qwen()
    states = ["off", "on"] + (["old"] if old else []) + (["sampled"] if ratio is not None else []) \
        + (["before"] if before else [])
    code = {state: path for state, path in (("old", old), ("before", before)) if path is not None}
    rows = []
    with procs.token_server(model.name, model.output(SHORT - 1)) as short, \
            procs.token_server(model.name, model.output(LONG - 1)) as long, otlp_sink() as sink:
        for i in range(rounds):
            order = states if i % 2 == 0 else states[::-1]
            spans = sink["spans"]
            shorts = _round(order, short, requests, blocks, sink, ratio or 0.0, code, profile)
            longs = _round(order, long, max(20, requests // 5), max(2, blocks // 2), sink, ratio or 0.0, code)
            row: dict[str, Any] = {"round": i, "spans_exported": sink["spans"] - spans}
            for state in states:
                (short_ms, short_tokens, loop), (long_ms, long_tokens, _) = shorts[state], longs[state]
                row[state] = {"cpu_ms_per_request": round(short_ms, 4),
                              "event_loop_ms_per_request": round(short_ms * loop, 4),
                              "other_threads_ms_per_request": round(short_ms * (1 - loop), 4),
                              "cpu_us_per_token": round((long_ms - short_ms) * 1000 / (long_tokens - short_tokens), 3)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary: dict[str, Any] = {}
    for state in states:
        summary[state] = {key: _spread([r[state][key] for r in rows])
                          for key in ("cpu_ms_per_request", "event_loop_ms_per_request", "other_threads_ms_per_request",
                                      "cpu_us_per_token")}
        if state != "off":  # the round's own off side is its baseline
            summary[state]["cpu_per_request_vs_off"] = _spread(
                [r[state]["cpu_ms_per_request"] / r["off"]["cpu_ms_per_request"] for r in rows])
    return {"machine": machine.describe(), "rounds": rounds, "requests": requests, "blocks": blocks, "ratio": ratio,
            "rows": rows, "summary": summary}


def helper_costs(requests: int, blocks: int = 6) -> dict[str, Any]:
    """One round of "off", "on" and "timed" (traced, each tracing helper timed by its thread's
    CPU clock: bench/timed_gateway.py): each helper's CPU µs per call and per request served."""
    model = qwen()
    with tempfile.TemporaryDirectory() as scratch, procs.token_server(model.name, model.output(SHORT - 1)) as short, \
            otlp_sink() as sink:
        out = Path(scratch) / "helpers.json"
        sides = _round(["off", "on", "timed"], short, requests, blocks, sink, 0.0, {"timed": out})
        totals = json.loads(out.read_text())
    served = requests + max(5, requests // 10)  # the timed requests and the warm-up's
    helpers = {name: {"us_per_call": round(ns / calls / 1000, 2), "us_per_request": round(ns / served / 1000, 2)}
               for name, (ns, calls) in sorted(totals.items(), key=lambda item: -item[1][0]) if name != "clock"}
    return {"cpu_ms_per_request": {side: round(ms, 4) for side, (ms, _, _) in sides.items()},
            "clock_us_per_call": round(totals["clock"][0] / totals["clock"][1] / 1000, 2), "helpers": helpers}


def span_cost(iterations: int = 2000) -> dict[str, float]:
    """CPU µs per request of the spans alone, in this process: one request's spans (the
    request's and its generation's, with the gateway's attribute sets and its phases timed)
    made through gateway/core/tracing.py and exported by the gateway's OTLP/HTTP exporter
    (gateway/server/otlp.py) to the sink, timed by process CPU time (the exporter's thread
    included, flushed at the end)."""

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import SpanKind

    from gateway.core import tracing
    from gateway.server.otlp import Batches, span_exporter

    headers = [(b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]
    with otlp_sink() as sink:
        provider = TracerProvider()
        provider.add_span_processor(Batches(span_exporter("http/protobuf", sink["endpoint"]),
                                            {"OTEL_BSP_MAX_QUEUE_SIZE": "65536"}))
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
    parser.add_argument("--rounds", "--pairs", type=int, default=5, help="rounds (--pairs: its earlier name)")
    parser.add_argument("--requests", type=int, default=600, help="short requests per side and round (long: a fifth)")
    parser.add_argument("--ratio", type=float, help="also measure traces on with this fraction sampled")
    parser.add_argument("--spans-only", action="store_true", help="only the spans' own CPU per request, in process")
    parser.add_argument("--before", type=Path, help="a checkout of the code before traces, measured as a side too")
    parser.add_argument("--old", type=Path, help="an earlier checkout, measured traced as a side too")
    parser.add_argument("--profile", type=Path, help="py-spy's stacks of the traced gateways, written here")
    parser.add_argument("--helpers", action="store_true",
                        help="one round with a traced gateway whose tracing helpers are each timed (thread CPU)")
    args = parser.parse_args()
    if args.helpers:
        print(json.dumps(helper_costs(args.requests), indent=1))
        return
    if args.spans_only:
        print(json.dumps([span_cost() for _ in range(5)]))
        return
    if args.profile is not None:
        for state in ("on", "old"):
            _profile_of(args.profile, state).write_text("")
    result = run(args.rounds, args.requests, args.ratio, args.before, args.old, args.profile)
    print(json.dumps({key: result[key] for key in ("machine", "summary")}, indent=1))
    if args.profile is not None:
        print(json.dumps({state: profile_summary(_profile_of(args.profile, state))
                          for state in ("on", "old") if _profile_of(args.profile, state).stat().st_size}, indent=1))


if __name__ == "__main__":
    main()
