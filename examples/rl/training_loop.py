"""An asynchronous RL trainer's loop through the gateway's one URL: rollouts keep streaming while
each training step pauses every replica, loads the step's weights, labels them and resumes.

    python examples/rl/training_loop.py --gateway http://127.0.0.1:8080 --model tiny-qwen3 \\
        --weights /ckpt/step-1 /ckpt/step-2 /ckpt/step-3 [--admin-key KEY] [--direct URL URL]

Each step is vLLM's own sequence (the replicas run with VLLM_SERVER_DEV_MODE=1, the gateway with
--server-dev-mode), sent once to the gateway, which sends it to every replica:

    POST /pause?mode=keep                       in-flight rollouts freeze, new ones wait at the gateway
    POST /collective_rpc  {"method": "reload_weights", "kwargs": {"weights_path": DIR}}
    POST /reset_prefix_cache?reset_running_requests=true   no KV of the old weights is reused
    POST /update_weight_version {"new_version": "step-K"}
    POST /resume

Meanwhile `--rollouts` workers stream `/inference/v1/generate` with a `rollout_id` each, and before
each step one more rollout is held across it on purpose: the step starts once that one has streamed
its first tokens, with many more to go, so it is frozen mid-generation by the pause. At the end
every rollout is exported (`GET /v1/rollouts/{id}`) and checked: every generated token carries the
version that produced it, and along a rollout the versions only move forward. With `--direct`, the
same pause → resume cycle is also timed sent straight to each replica (concurrently, as a framework
does itself behind a load balancer), interleaved with cycles through the gateway.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx


class Target:
    """Where control calls go: the gateway's one URL, or each replica's (all at once)."""

    def __init__(self, urls: Sequence[str], admin_key: str | None = None) -> None:
        self.urls = list(urls)
        self.client = httpx.Client(timeout=600, headers={"authorization": f"Bearer {admin_key}"} if admin_key else {})
        self.pool = ThreadPoolExecutor(max(len(self.urls), 1))

    def get(self, path: str) -> Any:
        """The first URL's answer (the gateway's, for the fleet)."""
        response = self.client.get(self.urls[0] + path)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, body: dict | None = None) -> list[Any]:
        def one(url: str) -> Any:
            response = self.client.post(url + path, json=body)
            response.raise_for_status()
            return response.json() if response.content else None
        return list(self.pool.map(one, self.urls))


def step(target: Target, version: str, weights: str) -> float:
    """One weight update (the sequence above); seconds from the pause to the resume's answer."""
    started = time.perf_counter()
    target.post("/pause?mode=keep")
    target.post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": weights}})
    target.post("/reset_prefix_cache?reset_running_requests=true")
    target.post("/update_weight_version", {"new_version": version})
    target.post("/resume")
    return time.perf_counter() - started


def cycle(target: Target) -> float:
    """A bare pause (keep) → resume; its seconds."""
    started = time.perf_counter()
    target.post("/pause?mode=keep")
    target.post("/resume")
    return time.perf_counter() - started


class Rollouts:
    """`workers` threads streaming generations, one rollout each, until `stop()`."""

    def __init__(self, gateway: str, model: str, workers: int, max_tokens: int = 48,
                 prompt: Sequence[int] = (785, 6722, 315, 9625, 374)) -> None:
        self.gateway, self.model, self.max_tokens, self.prompt = gateway, model, max_tokens, list(prompt)
        self.ids: list[str] = []
        self.tokens = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(workers)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(600)

    def held(self, rollout_id: str, max_tokens: int = 3000, timeout: float = 300.0) -> threading.Thread:
        """A rollout of `max_tokens` streaming on its own thread, returned once it has streamed its
        first tokens (a step that follows lands in the middle of it)."""
        started = threading.Event()

        def run() -> None:
            body = {"model": self.model, "token_ids": self.prompt + [len(self.ids)], "stream": True,
                    "rollout_id": rollout_id, "sampling_params": {
                        "temperature": 1.0, "max_tokens": max_tokens, "ignore_eos": True}}
            with httpx.Client(timeout=600) as client, \
                    client.stream("POST", self.gateway + "/inference/v1/generate", json=body) as response:
                response.raise_for_status()
                for line in response.iter_lines():
                    if line.startswith("data: {") and any(c.get("token_ids") for c in json.loads(line[6:])["choices"]):
                        started.set()
            with self._lock:
                self.ids.append(rollout_id)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        if not started.wait(timeout):
            raise TimeoutError(f"the held rollout {rollout_id} streamed nothing in {timeout:g} s")
        return thread

    def wait_for_tokens(self, more: int, timeout: float = 300.0) -> None:
        """Until `more` tokens streamed since the call (so every step lands on live streams)."""
        target, deadline = self.tokens + more, time.monotonic() + timeout
        while self.tokens < target:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the rollouts streamed fewer than {more} tokens in {timeout:g} s")
            time.sleep(0.01)

    def _run(self, worker: int) -> None:
        with httpx.Client(timeout=600) as client:
            n = 0
            while not self._stop.is_set():
                rollout_id = f"rollout-{worker}-{n}"
                body = {"model": self.model, "token_ids": self.prompt + [worker, n], "stream": True,
                        "rollout_id": rollout_id, "sampling_params": {
                            "temperature": 1.0, "max_tokens": self.max_tokens, "ignore_eos": True}}
                with client.stream("POST", self.gateway + "/inference/v1/generate", json=body) as response:
                    response.raise_for_status()
                    for line in response.iter_lines():
                        if line.startswith("data: {"):
                            count = sum(len(c.get("token_ids") or ()) for c in json.loads(line[6:])["choices"])
                            with self._lock:
                                self.tokens += count
                with self._lock:
                    self.ids.append(rollout_id)
                n += 1


def check(gateway: str, rollout_ids: Sequence[str], order: Sequence[str]) -> dict[str, Any]:
    """Every generated token of every rollout has a version, and versions follow `order`."""
    tagged: dict[str, int] = {}
    untagged = backwards = crossing = 0
    with httpx.Client(timeout=60) as client:
        for rollout_id in rollout_ids:
            export = client.get(f"{gateway}/v1/rollouts/{rollout_id}").json()
            versions = [v for v, mask in zip(export["weight_versions"], export["loss_mask"]) if mask]
            untagged += sum(v is None for v in versions)
            ranks = [order.index(v) for v in versions if v is not None]
            backwards += sum(later < earlier for earlier, later in itertools.pairwise(ranks))
            crossing += len(set(ranks)) > 1
            for version in versions:
                tagged[version] = tagged.get(version, 0) + 1
    return {"rollouts": len(rollout_ids), "tokens_by_version": tagged, "untagged_tokens": untagged,
            "versions_going_backwards": backwards, "rollouts_spanning_an_update": crossing}


def train(gateway: str, model: str, weights: Sequence[str], *, admin_key: str | None = None,
          workers: int = 2, name: str = "step-{}") -> dict[str, Any]:
    """The steps (step k's version: `name` formatted with k), with rollouts streaming through all
    of them; the checked summary."""
    target = Target([gateway], admin_key)
    order = [target.get("/weight_info")["weight_version"], *(name.format(k) for k in range(1, len(weights) + 1))]
    rollouts = Rollouts(gateway, model, workers)
    rollouts.start()
    seconds, held = [], []
    try:
        for k, (version, path) in enumerate(zip(order[1:], weights), start=1):
            rollouts.wait_for_tokens(32)
            held.append(rollouts.held(f"held-{version}-{k}"))
            seconds.append(step(target, version, path))
        rollouts.wait_for_tokens(32)
    finally:
        rollouts.stop()
        for thread in held:
            thread.join(600)
    return {"steps": len(weights), "step_seconds": [round(s, 4) for s in seconds],
            **check(gateway, rollouts.ids, order),
            "held_across": [spanned(gateway, f"held-{version}-{k}") for k, version in enumerate(order[1:], start=1)]}


def spanned(gateway: str, rollout_id: str) -> list[str]:
    """The versions a rollout's generated tokens came from, in order, each once."""
    export = httpx.get(f"{gateway}/v1/rollouts/{rollout_id}", timeout=60).json()
    versions = [v for v, mask in zip(export["weight_versions"], export["loss_mask"]) if mask]
    return [v for i, v in enumerate(versions) if i == 0 or versions[i - 1] != v]


def compare(gateway: Target, direct: Target, cycles: int) -> dict[str, Any]:
    """Pause → resume through the gateway and straight to the replicas, interleaved."""
    times: dict[str, list[float]] = {"gateway": [], "direct": []}
    for i in range(cycles):
        for name in (("gateway", "direct") if i % 2 == 0 else ("direct", "gateway")):
            times[name].append(cycle(gateway if name == "gateway" else direct))

    def spread(values: list[float]) -> dict[str, float]:
        return {"min_ms": round(1000 * min(values), 2), "median_ms": round(1000 * statistics.median(values), 2),
                "max_ms": round(1000 * max(values), 2)}
    added = [g - d for g, d in zip(times["gateway"], times["direct"])]
    return {"cycles": cycles, **{name: spread(values) for name, values in times.items()},
            "added": spread(added)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gateway", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--weights", nargs="+", required=True, help="a checkpoint dir per step")
    parser.add_argument("--admin-key")
    parser.add_argument("--rollouts", type=int, default=2, help="rollout workers streaming all along")
    parser.add_argument("--direct", nargs="*", default=[], help="the replicas' URLs: also time pause → resume "
                                                               "straight to them against the gateway")
    parser.add_argument("--cycles", type=int, default=20)
    args = parser.parse_args()
    summary = train(args.gateway, args.model, args.weights, admin_key=args.admin_key, workers=args.rollouts)
    if args.direct:
        summary["pause_resume"] = compare(Target([args.gateway], args.admin_key), Target(args.direct), args.cycles)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
