"""Soak: a mixed load with injected faults against a real gateway process, for minutes.

    python -m bench.soak --minutes 10 [--out results/soak.json]
    python -m bench.soak --quick          # 10 s, what CI's smoke test runs

The gateway (`vllm-gateway serve`) runs in front of the bench's token server
(bench/upstream.py, `--faults --record-prompts`); `--concurrency` clients each loop over:

- a Responses chain over HTTP (SSE or JSON per turn) continued by `previous_response_id`;
- a chain that resends its full history (`store: false`, a `prompt_cache_key`);
- a WebSocket chain (`previous_response_id` on the socket);
- a Chat Completions request (streamed or not);
- a bad body (not JSON, a wrong type, an unknown parameter): a 400 is the right answer.

Faults: about 1% of generations are dropped by the replica after 3 tokens (tag ending in 1),
and 10% of streaming clients leave after the first text delta (the chain ends there).

Reported: requests, outcomes by class (`unexpected` is what no injected fault explains),
broken chains (a continuation whose prompt does not start with its parent's prompt and
output ids, from the prompts the token server recorded), the gateway's RSS and open files
sampled over the run with their growth per 1,000 requests (a least-squares slope past the
first fifth of the run, the warm-up), and the gateway's CLOSE-WAIT sockets after the load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from bench import procs
from bench.models import qwen

DROP_RATE = 0.01
LEAVE_RATE = 0.10
TURNS = 3


@dataclass
class Soak:
    url: str
    stub: str
    script: list[int]
    seed: int
    outcomes: Counter = field(default_factory=Counter)
    requests: int = 0
    _seq: int = 0
    chains: list[tuple[list[tuple[int, int]], list[int]]] = field(default_factory=list)  # (pairs, tags), ended

    def tag(self, rng: random.Random) -> int:
        """A request's max_tokens: unique (the token server keys its prompt by it), above the
        script's length (the whole output), ending in 1 when the replica is to drop it."""
        self._seq += 1
        return 1000 + self._seq * 10 + (1 if rng.random() < DROP_RATE else 2)

    def count(self, outcome: str) -> None:
        self.requests += 1
        self.outcomes[outcome] += 1


def _outcome(status: int, body: Any, dropped: bool) -> str:
    if status == 200:
        return "ok"
    code = body.get("error", {}).get("code") if isinstance(body, dict) else None
    if dropped and status == 502:
        return "upstream_dropped"
    return f"unexpected_{status}_{code}"


async def _sse(client: httpx.AsyncClient, path: str, body: dict, leave: bool) -> tuple[str, dict | None]:
    """(outcome, the final response for Responses)."""
    final = None
    async with client.stream("POST", path, json=body) as response:
        if response.status_code != 200:
            await response.aread()
            return _outcome(response.status_code, response.json(), body_dropped(body)), None
        last = None
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return "ok", None
            event = orjson.loads(data)
            last = event.get("type")
            if leave and last in ("response.output_text.delta", None):
                return "client_left", None
            if last == "response.completed":
                final = event["response"]
            elif last == "response.failed":
                return ("upstream_dropped" if body_dropped(body) else "unexpected_response_failed"), None
    if path.endswith("chat/completions"):
        return "unexpected_cut_stream", None
    return ("ok", final) if final is not None else ("unexpected_cut_stream", None)


def body_dropped(body: dict) -> bool:
    return (body.get("max_output_tokens") or body.get("max_tokens") or 0) % 10 == 1


async def _http_chain(soak: Soak, client: httpx.AsyncClient, rng: random.Random, resend: bool) -> None:
    pairs, tags, parent = [], [], None
    history: list[dict] = []
    key = f"soak-{rng.getrandbits(48):x}"
    previous_id = None
    for turn in range(TURNS):
        tag = soak.tag(rng)
        tags.append(tag)
        user = {"role": "user", "content": f"turn {turn}: {rng.getrandbits(32)}"}
        body: dict[str, Any] = {"model": "bench-qwen3", "max_output_tokens": tag}
        if resend:
            history.append(user)
            body |= {"input": history, "store": False, "prompt_cache_key": key}
        else:
            body |= {"input": [user], "store": True}
            if previous_id:
                body["previous_response_id"] = previous_id
        stream = rng.random() < 0.6
        leave = stream and rng.random() < LEAVE_RATE
        if stream:
            outcome, final = await _sse(client, "/v1/responses", {**body, "stream": True}, leave)
        else:
            answer = await client.post("/v1/responses", json=body)
            outcome = _outcome(answer.status_code, answer.json(), body_dropped(body))
            final = answer.json() if outcome == "ok" else None
        soak.count(outcome)
        if parent is not None:
            pairs.append((parent, tag))
        if final is None:
            break
        parent, previous_id = tag, final["id"]
        history.extend(final["output"])
    soak.chains.append((pairs, tags))


async def _ws_chain(soak: Soak, rng: random.Random) -> None:
    pairs, tags, parent, previous_id = [], [], None, None
    url = soak.url.replace("http://", "ws://") + "/v1/responses"
    async with connect(url, max_size=None, open_timeout=60) as ws:
        for turn in range(TURNS):
            tag = soak.tag(rng)
            tags.append(tag)
            body: dict[str, Any] = {"type": "response.create", "model": "bench-qwen3", "max_output_tokens": tag,
                                    "store": False, "input": [{"role": "user", "content": f"ws turn {turn}"}]}
            if previous_id:
                body["previous_response_id"] = previous_id
            if parent is not None:
                pairs.append((parent, tag))
            await ws.send(orjson.dumps(body).decode())
            leave = rng.random() < LEAVE_RATE
            outcome, final = "unexpected_ws_cut", None
            try:
                while True:
                    event = orjson.loads(await ws.recv())
                    kind = event["type"]
                    if leave and kind == "response.output_text.delta":
                        outcome = "client_left"
                        break
                    if kind == "response.completed":
                        outcome, final = "ok", event["response"]
                        break
                    if kind in ("response.failed", "error"):
                        outcome = "upstream_dropped" if body_dropped(body) else f"unexpected_ws_{kind}"
                        break
            except ConnectionClosed:
                pass
            soak.count(outcome)
            if final is None:
                break  # leaving: the socket closes mid-response as the context manager exits
            parent, previous_id = tag, final["id"]
    soak.chains.append((pairs, tags))


async def _chat(soak: Soak, client: httpx.AsyncClient, rng: random.Random) -> None:
    tag = soak.tag(rng)
    body = {"model": "bench-qwen3", "max_tokens": tag, "messages": [{"role": "user", "content": "chat"}]}
    if rng.random() < 0.5:
        outcome, _ = await _sse(client, "/v1/chat/completions", {**body, "stream": True}, rng.random() < LEAVE_RATE)
    else:
        answer = await client.post("/v1/chat/completions", json=body)
        outcome = _outcome(answer.status_code, answer.json(), body_dropped(body))
    soak.count(outcome)
    soak.chains.append(([], [tag]))


BAD_BODIES = [b"{not json", b'{"model": "bench-qwen3", "input": 7}', b'{"model": "bench-qwen3", "input": "x", "bogus": 1}',
              b'{"model": "bench-qwen3", "input": [{"type": "reasoning", "content": "x"}]}', b"[]",
              b'{"model": "bench-qwen3", "input": "x", "top_k": -5}']


async def _bad(soak: Soak, client: httpx.AsyncClient, rng: random.Random) -> None:
    answer = await client.post("/v1/responses", content=rng.choice(BAD_BODIES),
                               headers={"content-type": "application/json"})
    error = answer.json().get("error", {}) if answer.headers.get("content-type", "").startswith("application/json") else {}
    shaped = set(error) == {"message", "type", "param", "code"}
    soak.count("bad_body_400" if answer.status_code == 400 and shaped else f"unexpected_bad_body_{answer.status_code}")


async def _worker(soak: Soak, index: int, deadline: float) -> None:
    rng = random.Random(soak.seed * 1000 + index)
    async with httpx.AsyncClient(base_url=soak.url, timeout=60) as client:
        while time.monotonic() < deadline:
            pick = rng.random()
            try:
                if pick < 0.30:
                    await _http_chain(soak, client, rng, resend=False)
                elif pick < 0.50:
                    await _http_chain(soak, client, rng, resend=True)
                elif pick < 0.70:
                    await _ws_chain(soak, rng)
                elif pick < 0.95:
                    await _chat(soak, client, rng)
                else:
                    await _bad(soak, client, rng)
            except (httpx.HTTPError, OSError, ConnectionClosed) as exc:
                soak.count(f"unexpected_{type(exc).__name__}")


class ChainCheck:
    """Continuations checked against the prompts the token server recorded, as chains end."""

    def __init__(self, soak: Soak) -> None:
        self.soak = soak
        self.prompts: dict[int, list[int]] = {}
        self.checked = 0
        self.broken = 0
        self.missing = 0
        self._waiting: list[tuple[list[tuple[int, int]], list[int]]] = []

    async def poll(self, client: httpx.AsyncClient) -> None:
        """Chains that ended before the previous poll are checked now (their prompts are in)."""
        ready, self._waiting = self._waiting, self.soak.chains
        self.soak.chains = []
        self.prompts.update({int(k): v for k, v in (await client.get(self.soak.stub + "/prompts")).json().items()})
        for pairs, tags in ready:
            for parent, child in pairs:
                if parent not in self.prompts or child not in self.prompts:
                    self.missing += 1
                    continue
                expected = self.prompts[parent] + self.soak.script
                self.checked += 1
                self.broken += self.prompts[child][:len(expected)] != expected
            for tag in tags:
                self.prompts.pop(tag, None)


def _memory(pid: int) -> tuple[int, int]:
    """(RSS kB, open files) of the gateway."""
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
               if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


TCP_STATES = {"01": "ESTABLISHED", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "0A": "LISTEN"}


def gateway_sockets(pid: int, upstream_port: int) -> dict[str, dict[str, int]]:
    """The gateway's TCP sockets by peer (the replica, or clients) and state, from /proc."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    found: dict[str, Counter] = {"to_replica": Counter(), "from_clients": Counter()}
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] not in inodes:
                    continue
                peer = "to_replica" if int(fields[2].rsplit(":", 1)[1], 16) == upstream_port else "from_clients"
                found[peer][TCP_STATES.get(fields[3], fields[3])] += 1
    return {peer: dict(sorted(states.items())) for peer, states in found.items()}


def _slope_per_1000(samples: list[tuple[int, int, int]], column: int) -> float | None:
    """Least-squares growth of a sampled figure per 1,000 requests, past the first fifth (warm-up)."""
    points = [(s[0], s[column]) for s in samples[len(samples) // 5:]]
    if len(points) < 3 or points[-1][0] == points[0][0]:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in points)
    variance = sum((x - mean_x) ** 2 for x, _ in points)
    return round(covariance / variance * 1000, 3)


async def run_load(gateway: procs.Process, stub: procs.Process, script: list[int], seconds: float,
                   concurrency: int, seed: int) -> dict[str, Any]:
    soak = Soak(gateway.url, stub.url, script, seed)
    check = ChainCheck(soak)
    started = time.monotonic()
    deadline = started + seconds
    samples: list[tuple[int, int, int]] = []  # (requests, RSS kB, open files)
    every = max(1.0, seconds / 60)
    workers = [asyncio.create_task(_worker(soak, i, deadline)) for i in range(concurrency)]
    async with httpx.AsyncClient(timeout=60) as client:
        while not all(w.done() for w in workers):
            await asyncio.sleep(every)
            samples.append((soak.requests, *_memory(gateway.pid)))
            await check.poll(client)
        await asyncio.gather(*workers)
        elapsed = time.monotonic() - started
        await asyncio.sleep(2.0)  # let the last aborts and closes land
        await check.poll(client)
        await check.poll(client)
    rss, files = _memory(gateway.pid)
    sockets = gateway_sockets(gateway.pid, stub.port)
    unexpected = sum(n for outcome, n in soak.outcomes.items() if outcome.startswith("unexpected"))
    return {
        "seconds": round(elapsed, 1), "concurrency": concurrency, "requests": soak.requests,
        "requests_per_s": round(soak.requests / elapsed, 1), "outcomes": dict(sorted(soak.outcomes.items())),
        "unexpected_errors": unexpected,
        "continuations_checked": check.checked, "broken_chains": check.broken, "continuations_unrecorded": check.missing,
        "rss_kb": {"first": samples[0][1] if samples else rss, "last": rss, "max": max([s[1] for s in samples] + [rss])},
        "open_files": {"first": samples[0][2] if samples else files, "last": files},
        "rss_kb_per_1000_requests": _slope_per_1000(samples, 1),
        "open_files_per_1000_requests": _slope_per_1000(samples, 2),
        "close_wait_sockets": sum(states.get("CLOSE_WAIT", 0) for states in sockets.values()),
        "sockets_after": sockets,
        "samples": len(samples),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="10 seconds (CI's smoke test)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    seconds = 10.0 if args.quick else args.minutes * 60
    model = qwen()
    script = model.output(15)
    with procs.token_server(model.name, script, step_ms=3, cpu=None,
                            extra=["--faults", "--record-prompts", "--no-timings"]) as stub, \
            procs.gateway(stub.url, str(model.model_dir), model.chat_format, cpu=None,
                          extra=["--served-model-name", model.name]) as gateway:
        result = asyncio.run(run_load(gateway, stub, script, seconds, args.concurrency, args.seed))
    result = {"machine": {"cores": os.cpu_count(), "load_avg_1m": os.getloadavg()[0]}, **result}
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
