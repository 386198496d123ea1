"""A DNS name with many addresses (a headless Service) becomes one replica per address."""

from __future__ import annotations

import asyncio
import socket

import pytest

from gateway.upstream._discovery import Resolver, needs_dns
from gateway.upstream.health import HealthPolicy
from gateway.upstream.pool import Pool
from tests.support.fake_vllm import FakeVLLM


@pytest.fixture
def dns(monkeypatch):
    """Answers for loop.getaddrinfo: name → addresses (an OSError instance fails the lookup)."""
    answers: dict[str, list[str] | OSError] = {}

    real = asyncio.BaseEventLoop.getaddrinfo

    async def getaddrinfo(loop, host, port, *, type=0, **kwargs):
        if host not in answers:  # e.g. the client connecting to 127.0.0.1
            return await real(loop, host, port, type=type, **kwargs)
        answer = answers[host]
        if isinstance(answer, OSError):
            raise answer
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, type, 6, "", (a, port)) for a in answer]

    monkeypatch.setattr(asyncio.BaseEventLoop, "getaddrinfo", getaddrinfo)
    return answers


def test_literal_addresses_are_used_as_given():
    assert not needs_dns("http://127.0.0.1:8000") and not needs_dns("http://[::1]:8000")
    assert not needs_dns("http://localhost:8000") and needs_dns("http://vllm.default.svc:8000")


async def test_one_replica_per_address_and_a_failed_lookup_keeps_the_last_answer(dns):
    resolver = Resolver(["http://vllm-headless:8000/", "http://127.0.0.1:9000"])
    dns["vllm-headless"] = ["10.1.0.7", "10.1.0.5", "fd00::3", "10.1.0.5"]
    assert resolver.dynamic
    expected = ["http://10.1.0.5:8000", "http://10.1.0.7:8000", "http://[fd00::3]:8000", "http://127.0.0.1:9000"]
    assert await resolver.resolve() == expected
    dns["vllm-headless"] = socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
    assert await resolver.resolve() == expected


async def test_scale_up_is_warmed_before_routing_and_scale_down_drains():
    pool = Pool([])
    a, b = pool.sync(["http://10.1.0.5:8000", "http://10.1.0.7:8000"], watch=False)
    assert a.state == b.state == "starting" and not pool.ready  # not routable before admission
    a.state = b.state = "ready"
    b.inflight = 1  # a stream still runs on b
    pool.sync(["http://10.1.0.5:8000"], watch=False)
    assert b.state == "draining" and pool.replicas == [a, b]
    assert all(pool.pick(f"s{i}") is a for i in range(20))
    b.inflight = 0
    (c,) = pool.sync(["http://10.1.0.5:8000", "http://10.1.0.9:8000"], watch=False)
    assert pool.replicas == [a, c] and c.state == "starting"
    await pool.close()


async def test_pool_follows_the_name_to_a_real_server(dns):
    with FakeVLLM(max_model_len=4096) as fake:
        port = fake.url.rsplit(":", 1)[1]
        dns["vllm-headless"] = ["127.0.0.1"]
        pool = Pool([f"http://vllm-headless:{port}"], resolve_interval=0.05,
                    policy=HealthPolicy(interval=0.05, backoff_min=0.05, backoff_max=0.2))
        await pool.start()
        try:
            (replica,) = pool.replicas
            assert replica.url == fake.url and replica.healthy and replica.max_model_len == 4096
            assert fake.probes[-1].body["request_id"].startswith("warmup")
            dns["vllm-headless"] = []  # scaled to zero
            while pool.replicas:
                await asyncio.sleep(0.05)
            dns["vllm-headless"] = ["127.0.0.1"]  # and back: probed and warmed up again
            while not pool.ready:
                await asyncio.sleep(0.05)
        finally:
            await pool.close()
