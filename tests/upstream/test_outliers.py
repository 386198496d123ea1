"""Outlier detection with scripted faulty replicas behind the real gateway: a failed stream
does not take a replica out, failures in a row do, never more than the allowed share of the
pool, every replica out still serves (panic routing), and a flapping replica stays out longer
each time."""

from __future__ import annotations

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.stack import fake_stack
from tests.support.waiting import wait_for

FAST_CHECKS = {"health_interval": 0.1, "health_backoff_max": 0.2}
BODY = {"model": "tiny-qwen3", "input": "Greet"}


def ask(url: str, key: str | None = None) -> httpx.Response:
    body = BODY if key is None else {**BODY, "prompt_cache_key": key}
    return httpx.post(url + "/v1/responses", json=body, timeout=30)


def pinned(stack, fake) -> str:
    """A session key whose requests go to `fake`'s replica while it is in the pool."""
    return next(key for key in (f"session-{i}" for i in range(1000))
                if stack.runtime.pool.pick(key).url == fake.url)


def text(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.json()["output"][0]["content"][0]["text"]


def metric(url: str, name: str) -> dict[str, float]:
    """`name`'s samples in /metrics, by their label text."""
    samples = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith((name + "{", name + " ")):
            labels, _, value = line[len(name):].rpartition(" ")
            samples[labels] = float(value)
    return samples


def failures(tokenizer) -> list[Script]:
    """Each way a replica fails a request: cut mid-stream, a malformed event, vLLM's in-stream
    error, a 500 before any token."""
    answer = ids(tokenizer, "Hello there") + [IM_END]
    return [Script(answer, drop_after=1), Script(answer, malformed_after=1), Script(answer, error_after=1),
            Script([], status=500, error_message="engine failed")]


def test_with_one_replica_failed_requests_do_not_take_it_out(qwen_tokenizer_dir, tokenizer):
    with fake_stack(qwen_tokenizer_dir, outlier_interval=600, **FAST_CHECKS) as stack:
        replica = stack.runtime.pool.replicas[0]
        for failure in failures(tokenizer) * 2:  # 8 in a row: far past --outlier-consecutive-failures
            stack.fake.queue(failure, Script(ids(tokenizer, "Hi") + [IM_END]))
            assert ask(stack.url).status_code in (502, 503)
            assert text(ask(stack.url)) == "Hi"  # the next request is served
        stack.fake.queue(*failures(tokenizer), *failures(tokenizer)[:1])
        assert [ask(stack.url).status_code for _ in range(5)] == [502, 502, 502, 503, 502]
        assert replica.healthy  # one replica is the whole pool: over --outlier-max-ejection-percent
        stack.fake.queue(Script(ids(tokenizer, "Still here") + [IM_END]))
        assert text(ask(stack.url)) == "Still here"
        # two would-be ejections: 12 of 20 requests failed, then 5 in a row
        assert metric(stack.url, "gateway_replica_ejections_overflow_total") == {"": 2.0}
        assert httpx.get(stack.url + "/ready").status_code == 200


async def test_after_an_upstream_drop_the_socket_and_http_clients_are_served(qwen_tokenizer_dir, tokenizer):
    """What the hair trigger refused: after one dropped stream, the next WebSocket response.create
    and two HTTP requests on a one-replica pool."""
    with fake_stack(qwen_tokenizer_dir, **FAST_CHECKS) as stack:
        stack.fake.queue(failures(tokenizer)[0], *(Script(ids(tokenizer, f"ok {i}") + [IM_END]) for i in range(3)))
        async with connect(stack.url.replace("http://", "ws://") + "/v1/responses") as ws:
            finals = []
            for _ in range(2):
                await ws.send(orjson.dumps({"type": "response.create", "model": "tiny-qwen3", "input": "Greet"}).decode())
                event = {}
                while event.get("type") not in ("response.completed", "response.failed", "error"):
                    event = orjson.loads(await ws.recv())
                finals.append(event["type"])
        assert finals == ["response.failed", "response.completed"]
        async with httpx.AsyncClient(timeout=30) as client:
            answers = [await client.post(stack.url + "/v1/responses", json=BODY) for _ in range(2)]
        assert [text(a) for a in answers] == ["ok 1", "ok 2"]


def test_consecutive_failures_eject_a_replica_and_the_other_serves(qwen_tokenizer_dir, tokenizer):
    with fake_stack(qwen_tokenizer_dir, replicas=2, outlier_consecutive_failures=3, outlier_base_ejection_time=100,
                    **FAST_CHECKS) as stack:
        bad, good = stack.fakes
        replica = next(r for r in stack.runtime.pool.replicas if r.url == bad.url)
        key = pinned(stack, bad)
        bad.queue(*failures(tokenizer)[:2], Script(ids(tokenizer, "Hi") + [IM_END]), *failures(tokenizer)[:3])
        good.queue(*(Script(ids(tokenizer, f"n{i}") + [IM_END]) for i in range(2)))
        assert [ask(stack.url, key).status_code for _ in range(3)] == [502, 502, 200]  # a success resets the run
        assert replica.healthy
        assert [ask(stack.url, key).status_code for _ in range(3)] == [502, 502, 502]
        assert replica.state == "ejected" and replica.outlier.ejections == {"consecutive_failures": 1}
        assert [text(ask(stack.url, key)) for _ in range(2)] == ["n0", "n1"]  # the other replica now
        assert len(bad.bodies("/inference/v1/generate")) == 6
        counted = {labels: n for labels, n in metric(stack.url, "gateway_replica_ejections_total").items() if n}
        assert counted == {f'{{reason="consecutive_failures",replica="{bad.url}"}}': 1.0}  # the other kinds at 0
        assert metric(stack.url, "gateway_replica_ejection_seconds")[f'{{replica="{bad.url}"}}'] == 100


def test_a_failure_rate_over_the_interval_ejects(qwen_tokenizer_dir, tokenizer):
    with fake_stack(qwen_tokenizer_dir, replicas=2, outlier_consecutive_failures=0, outlier_failure_percentage=50,
                    outlier_failure_request_volume=6, outlier_interval=600, outlier_base_ejection_time=100,
                    **FAST_CHECKS) as stack:
        bad, good = stack.fakes
        replica = next(r for r in stack.runtime.pool.replicas if r.url == bad.url)
        ok = Script(ids(tokenizer, "Hi") + [IM_END])
        drop = failures(tokenizer)[0]
        key = pinned(stack, bad)
        bad.queue(ok, drop, ok, drop, ok, drop)  # every other one fails: never two in a row
        assert [ask(stack.url, key).status_code for _ in range(5)] == [200, 502, 200, 502, 200]
        assert replica.healthy  # fewer than --outlier-failure-request-volume so far
        assert ask(stack.url, key).status_code == 502  # 3 of 6 failed
        assert replica.state == "ejected" and replica.outlier.ejections == {"failure_rate": 1}
        good.queue(ok)
        assert text(ask(stack.url, key)) == "Hi"


def test_every_replica_ejected_still_serves_by_panic_routing(qwen_tokenizer_dir, tokenizer):
    with fake_stack(qwen_tokenizer_dir, replicas=2, outlier_consecutive_failures=2, outlier_base_ejection_time=100,
                    outlier_max_ejection_percent=100, **FAST_CHECKS) as stack:
        drop = failures(tokenizer)[0]
        for fake in stack.fakes:
            fake.queue(drop, drop, Script(ids(tokenizer, "Served anyway") + [IM_END]))
        assert [ask(stack.url).status_code for _ in range(4)] == [502] * 4
        assert [r.state for r in stack.runtime.pool.replicas] == ["ejected", "ejected"]
        assert text(ask(stack.url)) == "Served anyway"  # not 503 upstream_unavailable
        assert metric(stack.url, "gateway_panic_routes_total") == {"": 1.0}


def test_a_stalled_single_replica_is_ejected_at_once_and_still_routed_to(qwen_tokenizer_dir, tokenizer):
    with fake_stack(qwen_tokenizer_dir, upstream_header_timeout=0.3, outlier_base_ejection_time=100,
                    **FAST_CHECKS) as stack:
        stack.fake.queue(Script(ids(tokenizer, "late") + [IM_END], header_delay=5),
                         Script(ids(tokenizer, "Back") + [IM_END]))
        assert ask(stack.url).status_code == 504
        assert stack.runtime.pool.replicas[0].outlier.ejections == {"stalled": 1}
        assert text(ask(stack.url)) == "Back"


def test_a_flapping_replica_stays_out_longer_each_time(qwen_tokenizer_dir, tokenizer):
    with fake_stack(qwen_tokenizer_dir, replicas=2, outlier_consecutive_failures=2, outlier_base_ejection_time=0.2,
                    outlier_interval=600, **FAST_CHECKS) as stack:
        bad = stack.fakes[0]
        replica = next(r for r in stack.runtime.pool.replicas if r.url == bad.url)
        key = pinned(stack, bad)
        drop = failures(tokenizer)[0]
        held = []
        for _ in range(3):
            bad.queue(drop, drop)
            assert [ask(stack.url, key).status_code for _ in range(2)] == [502, 502]
            assert replica.state == "ejected"
            held.append(replica.outlier.last_ejection_time)
            wait_for(lambda: replica.healthy, "the replica was readmitted (health check and warmup passed)")
        assert held == [0.2, 0.4, pytest.approx(0.6)]
        assert replica.outlier.ejections == {"consecutive_failures": 3}
