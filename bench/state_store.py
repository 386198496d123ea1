"""`python -m bench.state_store`: what a turn pays for keeping its session in Redis.

A turn reads its session before rendering and writes the new one after its generation.
Measured here, per turn, for a Codex session of 16k and 128k tokens that grows by 600 tokens a
turn (a tool output and the model's answer), next to the in-process store in the same run:

- in process: `MemoryStore` (a dict lookup and insert);
- Redis, local hit: the process served the previous turn, so it reads only the header and
  appends only the new tokens;
- Redis, store read: another process served the previous turn, so this one reads the whole
  log (the first time) and then writes;
- Redis, suffix read: this process held the session two turns ago, so it reads only the tail.

Redis is a private `redis-server` on loopback TCP, started here; `redis_ping` is a bare PING
measured the same way: on a busy machine most of a round trip is waiting for the scheduler to
run redis-server, then this process again. Writes
`bench/results/state-store.json`; the table in docs/benchmarks.md comes from it.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gateway.core.conversation import Conversation, Message
from gateway.store.backend import Store, open_store
from gateway.store.responses import ResponseStore
from gateway.store.rollouts import RolloutStore
from gateway.store.sessions import Session, SessionStore
from gateway.tokenfix.state import TokenState

GROWTH = 600  # tokens a turn adds
HISTORY = Conversation(items=[Message(role="user", text="hi")])


def _state(n_tokens: int) -> TokenState:
    tokens = [(i * 7919) % 151_000 for i in range(n_tokens)]
    return TokenState.build(HISTORY, list(HISTORY.items), tokens[:-GROWTH // 2], tokens[-GROWTH // 2:], {151645})


def _store(url: str | None, prefix: str) -> Store:
    return open_store(url, SessionStore(max_tokens=10**9), ResponseStore(), RolloutStore(), key_prefix=prefix)


async def _turns(mode: str, url: str | None, size: int, repeats: int) -> tuple[list[float], dict[str, float]]:
    """Seconds of store work (read + write) per turn, and the CPU milliseconds a turn cost this
    process (the measured part only) and redis-server (its own counters; the turns' work and
    the little done between them): what a quiet machine's round trips cannot go below."""
    prefix = f"bench{time.monotonic_ns()}:"
    a, b = _store(url, prefix), _store(url, prefix)
    states = {size + GROWTH * k: _state(size + GROWTH * k) for k in range(2 * repeats + 1)}  # built off the clock
    n = size
    await a.put_session("s", Session(_state(n)))
    await b.session("s")  # b holds it too (for the suffix case)
    times, cpu = [], 0.0
    redis_before = await _redis_cpu(a)
    for _ in range(repeats):
        n += GROWTH
        state = states[n]
        if mode == "store_read":  # a process that never held the session
            b.sessions.discard("s")
        reader = b if mode in ("store_read", "suffix_read") else a
        if mode == "suffix_read":  # a moved it on since b held it
            await a.put_session("s", Session(state))
            n += GROWTH
            state = states[n]
        if mode == "ping":  # the bare loopback round trip, after the same work between turns
            start, cpu_start = time.perf_counter(), time.process_time()
            await a.link.client.ping()  # type: ignore[attr-defined]
            times.append(time.perf_counter() - start)
            cpu += time.process_time() - cpu_start
            continue
        start, cpu_start = time.perf_counter(), time.process_time()
        found = await reader.session("s")
        assert found is not None
        spliced = SimpleNamespace(spliced=True, prefix=found.state)  # as a turn spliced onto it tells
        await reader.put_session("s", Session(state), spliced)  # type: ignore[arg-type]
        times.append(time.perf_counter() - start)
        cpu += time.process_time() - cpu_start
        if mode in ("store_read", "suffix_read"):
            await a.session("s")  # a follows, off the clock
    redis_cpu = (await _redis_cpu(a) - redis_before) if redis_before is not None else None
    await a.close()
    await b.close()
    return times, {"cpu_ms": round(cpu / repeats * 1000, 4),
                   "redis_cpu_ms": round(redis_cpu / repeats * 1000, 4) if redis_cpu is not None else None}


async def _redis_cpu(store: Store) -> float | None:
    """redis-server's CPU seconds so far (INFO cpu, from its getrusage); None in process."""
    link = getattr(store, "link", None)
    if link is None:
        return None
    info = await link.client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _summary(measured: tuple[list[float], dict[str, float]]) -> dict[str, Any]:
    times, cpu = measured
    ms = sorted(t * 1000 for t in times)
    q = statistics.quantiles(ms, n=10)
    return {"median_ms": round(statistics.median(ms), 4), "p10_ms": round(q[0], 4), "p90_ms": round(q[-1], 4),
            "n": len(ms), **cpu}


async def measure(repeats: int = 40) -> dict[str, Any]:
    from tests.support.redis_server import RedisServer  # a private redis-server, as the tests start it

    results: dict[str, Any] = {}
    with RedisServer() as server:
        for size in (16_000, 128_000):
            row = {"in_process": _summary(await _turns("local", None, size, repeats))}
            for mode in ("ping", "local", "suffix_read", "store_read"):
                row[f"redis_{mode}"] = _summary(await _turns(mode, server.url, size, repeats))
            results[str(size)] = row
    return results


ROWS = {"in_process": "in process (reference)", "redis_ping": "Redis: bare PING round trip",
        "redis_local": "Redis, local hit (header read + append)",
        "redis_suffix_read": "Redis, suffix read (held an older version)",
        "redis_store_read": "Redis, store read (whole log, then append)"}


def table(results: dict[str, Any]) -> str:
    """The markdown table of docs/benchmarks.md: median (p10–p90) ms per turn."""
    sizes = list(results)
    lines = ["| store work per turn | " + " | ".join(f"{int(s) // 1000}k tokens" for s in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for key, name in ROWS.items():
        cells = [f"{results[s][key]['median_ms']:.3f} ({results[s][key]['p10_ms']:.3f}–{results[s][key]['p90_ms']:.3f})"
                 for s in sizes]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_table(results: dict[str, Any]) -> str:
    """CPU ms per turn, this process + redis-server: the floor of a turn's store work when no
    other process competes for the cores (the wall figures above are not, on a loaded machine)."""
    sizes = list(results)
    lines = ["| CPU per turn (gateway + redis-server) | " + " | ".join(f"{int(s) // 1000}k tokens" for s in sizes)
             + " |", "|---|" + "---:|" * len(sizes)]
    for key, name in ROWS.items():
        cells = []
        for size in sizes:
            row = results[size][key]
            redis = row.get("redis_cpu_ms")
            cells.append(f"{row['cpu_ms']:.3f}" + (f" + {redis:.3f}" if redis is not None else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    results = asyncio.run(measure(repeats))
    out = Path(__file__).parent / "results" / "state-store.json"
    out.write_text(json.dumps({"time": time.strftime("%Y-%m-%d %H:%M"), "growth_tokens": GROWTH,
                               "results": results}, indent=1) + "\n")
    print(table(results))
    print()
    print(cpu_table(results))


if __name__ == "__main__":
    main()
