"""Admission, ejection and backoff of one replica, with faults injected by respx."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest
import respx

from gateway.core.errors import UpstreamUnavailable
from gateway.upstream import connection, health
from gateway.upstream.health import HealthPolicy
from gateway.upstream.outlier import OutlierDetector, OutlierPolicy
from gateway.upstream.pool import Pool
from gateway.upstream.replica import Replica
from tests.support.raw_replica import CLOSE, RawReplica, answer, chunk, closed_port_url, ok_head, sse
from tests.upstream.taken import taken

URL = "http://10.0.0.1:8000"
MODELS = {"object": "list", "data": [{"id": "tiny-qwen3", "object": "model", "max_model_len": 4096}]}
COMPLETION = {"choices": [{"index": 0, "text": "", "token_ids": [11], "finish_reason": "length"}]}


@pytest.fixture
async def replica():
    async with httpx.AsyncClient() as client:
        yield Replica(URL, client)


@respx.mock
async def test_admitted_only_after_a_one_token_warmup_on_the_token_endpoint(replica):
    respx.get(URL + "/health").mock(return_value=httpx.Response(200))
    respx.get(URL + "/v1/models").mock(return_value=httpx.Response(200, json=MODELS))
    generate = respx.post(URL + "/inference/v1/generate").mock(
        side_effect=[httpx.Response(200, json={"choices": [{"token_ids": [11]}]}),  # the endpoint probe
                     httpx.Response(500, text="engine not ready"),  # the warmup fails: not routable
                     httpx.Response(200, json={"choices": [{"token_ids": [11]}]}),
                     httpx.Response(200, json={"choices": [{"token_ids": [11]}]})])
    assert not await health.admit(replica, "auto", HealthPolicy())
    assert replica.state == "starting" and not replica.healthy
    assert await health.admit(replica, "auto", HealthPolicy())
    assert replica.healthy and replica.api == "generate"
    assert (replica.served_model, replica.max_model_len) == ("tiny-qwen3", 4096)
    warmup = orjson.loads(generate.calls[-1].request.content)
    assert warmup["token_ids"] == [0] and warmup["sampling_params"]["max_tokens"] == 1
    assert warmup["model"] == "tiny-qwen3" and warmup["stream"] is False


@respx.mock
async def test_warmup_uses_completions_when_generate_is_not_served(replica):
    respx.get(URL + "/health").mock(return_value=httpx.Response(200))
    respx.get(URL + "/v1/models").mock(return_value=httpx.Response(200, json=MODELS))
    respx.post(URL + "/inference/v1/generate").mock(return_value=httpx.Response(403, text="scale-out disabled"))
    completions = respx.post(URL + "/v1/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    assert await health.admit(replica, "auto", HealthPolicy())
    assert replica.api == "completions"
    assert orjson.loads(completions.calls[0].request.content)["prompt"] == [0]


@respx.mock
async def test_failing_replica_is_ejected_retried_with_capped_backoff_and_readmitted(replica, monkeypatch):
    up = True
    respx.get(URL + "/health").mock(side_effect=lambda request: httpx.Response(200 if up else 503))
    respx.get(URL + "/v1/models").mock(return_value=httpx.Response(200, json=MODELS))
    respx.post(URL + "/v1/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    replica.state = "ready"
    sleeps: list[tuple[float, str]] = []

    class Done(Exception):
        pass

    async def fake_sleep(r: Replica, seconds: float) -> None:
        nonlocal up
        sleeps.append((seconds, r.state))
        if len(sleeps) == 1:
            up = False  # the replica dies during the first interval
        elif len(sleeps) == 7:
            up = True  # and comes back after six failed attempts
        elif len(sleeps) == 8:
            raise Done

    monkeypatch.setattr(health, "_sleep", fake_sleep)
    policy = HealthPolicy(interval=5.0, backoff_min=0.5, backoff_max=8.0)
    with pytest.raises(Done):
        await health.watch(replica, "completions", policy)
    assert sleeps == [(5.0, "ready"), (0.5, "ejected"), (1.0, "ejected"), (2.0, "ejected"), (4.0, "ejected"),
                      (8.0, "ejected"), (8.0, "ejected"), (5.0, "ready")]


@respx.mock
async def test_a_health_check_that_times_out_leaves_a_busy_replica_in_until_it_does_so_three_times(
        replica, monkeypatch):
    # vLLM's API server shares the CPU with its engine: on a loaded host a healthy replica answers late.
    respx.get(URL + "/health").mock(side_effect=[
        httpx.ConnectTimeout("busy"), httpx.Response(200), httpx.ReadTimeout("busy"), httpx.ConnectTimeout("busy"),
        httpx.ReadTimeout("busy"), httpx.Response(503)])
    replica.state = "ready"
    states = await watched_states(replica, monkeypatch, sleeps=6)
    assert states == ["ready", "ready", "ready", "ready", "ready", "ejected"]
    assert replica.outlier.ejections == {"health_check": 1}


@pytest.mark.parametrize("fault", [httpx.ConnectError("refused"), httpx.Response(503)], ids=["refused", "503"])
@respx.mock
async def test_a_refused_or_failed_health_check_ejects_at_once(replica, monkeypatch, fault):
    respx.get(URL + "/health").mock(side_effect=[fault, httpx.Response(503)])
    replica.state = "ready"
    assert await watched_states(replica, monkeypatch, sleeps=2) == ["ready", "ejected"]


async def watched_states(replica: Replica, monkeypatch: pytest.MonkeyPatch, sleeps: int) -> list[str]:
    """The replica's state at each of the health watcher's first `sleeps` sleeps."""
    replica.detector = OutlierDetector()
    replica.detector.members = [replica, Replica("http://10.0.0.2:8000", replica.client, state="ready")]
    states: list[str] = []

    class Done(Exception):
        pass

    async def fake_sleep(r: Replica, seconds: float) -> None:
        states.append(r.state)
        if len(states) == sleeps:
            raise Done

    monkeypatch.setattr(health, "_sleep", fake_sleep)
    with pytest.raises(Done):
        await health.watch(replica, "completions", HealthPolicy(unhealthy_threshold=3))
    return states


async def test_a_connect_timeout_counts_as_a_failure_and_ejects_only_in_a_row(monkeypatch):
    """A replica too busy to accept a connection in time is tried elsewhere and counted; only
    --outlier-consecutive-failures of them in a row eject it (a refusal ejects at once, below)."""
    monkeypatch.setattr(connection, "CONNECT_TIMEOUT", 0.05)

    async def never_accepted(*args, **kwargs):
        await asyncio.Event().wait()

    monkeypatch.setattr(asyncio.get_running_loop(), "create_connection", never_accepted)
    async with httpx.AsyncClient() as client:
        replica = Replica(URL, client, state="ready", served_model="tiny-qwen3")
        replica.detector = OutlierDetector(OutlierPolicy(consecutive_failures=2))
        replica.detector.members = [replica, Replica("http://10.0.0.2:8000", client, state="ready")]
        with pytest.raises(UpstreamUnavailable, match="timed out"):
            await replica.open([1, 2], {"max_tokens": 1}, "r1")
        assert replica.state == "ready" and replica.outlier.consecutive == 1 and not replica.wake.is_set()
        with pytest.raises(UpstreamUnavailable, match="timed out"):
            await replica.open([1, 2], {"max_tokens": 1}, "r2")
    assert replica.state == "ejected" and replica.outlier.ejections == {"consecutive_failures": 1}
    assert replica.inflight == 0 and replica.requests == 2


async def test_connection_refused_by_a_request_ejects_at_once():
    async with httpx.AsyncClient() as client:
        replica = Replica(closed_port_url(), client, state="ready", served_model="tiny-qwen3")
        with pytest.raises(Exception, match="unreachable"):
            await replica.open([1, 2], {"max_tokens": 1}, "r1")
    assert replica.state == "ejected" and replica.wake.is_set()  # the watcher re-probes now
    assert replica.inflight == 0 and replica.requests == 1


async def test_a_broken_stream_triggers_a_health_check_but_a_busy_answer_does_not():
    async with RawReplica() as raw, httpx.AsyncClient() as client:
        raw.queue([answer(503, b"overloaded")],
                  [ok_head(), chunk(sse({"choices": [{"index": 0, "token_ids": [5]}]})), CLOSE])
        replica = Replica(raw.url, client, state="ready")
        with pytest.raises(Exception, match="503"):
            await replica.open([1], {}, "r1")
        assert replica.healthy and not replica.wake.is_set()
        stream = await replica.open([1], {}, "r2")
        with pytest.raises(Exception, match="stream broke"):
            await taken(stream)
        await stream.aclose()
    assert replica.wake.is_set() and replica.healthy  # ejected only if the health check fails
    assert replica.inflight == 0 and not replica.streams


async def test_a_connection_that_breaks_while_opening_is_a_connection_error(monkeypatch):
    """A replica that dies while a connection opens (seen with kill -9): the token stream's
    connection is refused or hung up before a byte (tests/upstream/test_replica.py); the health
    check's httpx can leak anyio's AttributeError, which upstream/_transport.py makes a ConnectError."""
    async def broken(self, request):
        raise AttributeError("'NoneType' object has no attribute 'getpeername'")

    monkeypatch.setattr(httpx.AsyncHTTPTransport, "handle_async_request", broken)
    pool = Pool([URL])
    replica = Replica(URL, pool.client, state="ready", served_model="tiny-qwen3")
    try:
        assert await health.check(replica, HealthPolicy()) == "failed"  # the watcher sees a failed check, not a crash
    finally:
        await pool.close()
