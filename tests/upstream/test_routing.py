"""Routing properties: affinity is stable, load stays bounded, membership changes move few sessions."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.errors import UpstreamUnavailable
from gateway.upstream import routing
from gateway.upstream.pool import Pool


@dataclass(eq=False)
class Node:
    url: str
    inflight: int = 0
    requests: int = 0


def nodes(n: int) -> list[Node]:
    return [Node(f"http://10.0.0.{i}:8000") for i in range(n)]


keys = st.text(min_size=1, max_size=12)
sizes = st.integers(min_value=1, max_value=8)


@given(sizes, st.lists(keys, min_size=1, max_size=30), st.lists(st.integers(0, 5), min_size=8, max_size=8))
def test_a_session_stays_on_its_replica_while_it_is_within_the_load_bound(n, sessions, loads):
    replicas = nodes(n)
    for replica, load in zip(replicas, loads, strict=False):
        replica.inflight = load
    bound = routing.capacity(replicas)
    for key in sessions:
        first = routing.ranked(key, replicas)[0]
        chosen = routing.pick(replicas, key)
        assert chosen is routing.pick(replicas, key)  # deterministic
        if first.inflight < bound:
            assert chosen is first
        else:  # the next replica in the key's own order that has room
            assert chosen is next(r for r in routing.ranked(key, replicas) if r.inflight < bound)


@given(sizes, st.lists(st.tuples(st.sampled_from(["hot", "warm", None]) | keys, st.booleans()), max_size=200),
       st.sampled_from([1.0, 1.25, 2.0]))
def test_no_replica_exceeds_the_bound_even_for_one_hot_session(n, events, load_factor):
    """Each event sends a request (with its key), or finishes the oldest one (True)."""
    replicas = nodes(n)
    running: list[Node] = []
    for key, finish in events:
        if finish and running:
            running.pop(0).inflight -= 1
            continue
        total = sum(r.inflight for r in replicas) + 1
        chosen = routing.pick(replicas, key, load_factor=load_factor)
        chosen.inflight += 1
        chosen.requests += 1
        running.append(chosen)
        if key is not None:
            assert chosen.inflight <= math.ceil(load_factor * total / n)
    assert sum(r.inflight for r in replicas) == len(running)


@given(st.integers(min_value=2, max_value=8), st.lists(keys, min_size=1, max_size=50, unique=True), st.data())
def test_only_the_sessions_of_a_leaving_replica_move(n, sessions, data):
    replicas = nodes(n)
    before = {key: routing.pick(replicas, key) for key in sessions}
    gone = data.draw(st.sampled_from(replicas))
    remaining = [r for r in replicas if r is not gone]
    after = {key: routing.pick(remaining, key) for key in sessions}
    for key in sessions:
        if before[key] is not gone:
            assert after[key] is before[key]
    # and a replica joining only takes sessions for itself
    joined = Node("http://10.0.1.1:8000")
    for key in sessions:
        assert routing.pick([*remaining, joined], key) in (after[key], joined)


def test_sessions_spread_and_unkeyed_requests_go_to_the_least_busy():
    replicas = nodes(3)
    assert {routing.pick(replicas, f"s{i}").url for i in range(60)} == {r.url for r in replicas}
    replicas[0].inflight, replicas[1].inflight, replicas[2].inflight = 3, 1, 2
    assert routing.pick(replicas) is replicas[1]
    replicas[1].inflight = 2
    replicas[2].requests = 5
    assert routing.pick(replicas) is replicas[1]  # tie on in-flight: fewer requests served


async def test_pool_routes_among_ready_replicas_only():
    pool = Pool(["http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"])
    pool.sync(pool.resolver.upstreams, watch=False)
    a, b, _starting = pool.replicas
    a.state, b.state = "ready", "ready"  # c is still starting (not warmed up)
    assert {pool.pick(f"s{i}").url for i in range(40)} == {a.url, b.url}
    home = pool.pick("s1")
    assert pool.pick("s1", exclude=[home]) is not home  # the retry goes elsewhere
    b.state = "ejected"
    assert pool.pick("anything") is a and pool.ready
    a.state = "draining"
    assert not pool.ready
    with pytest.raises(UpstreamUnavailable):
        pool.pick()
    await pool.close()
