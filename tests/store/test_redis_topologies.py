"""The shared state on a real Redis Cluster (3 masters + 3 replicas) and behind Sentinel (a master,
a replica, 3 sentinels): sessions spread over the masters with each one's keys in one slot, two
gateway processes continue one session exactly, a killed master's session continues exactly
once its replica is promoted, and a session whose slot has no master left degrades, flagged,
without failing a turn. The store contract itself runs on both in test_state_contract.py."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import httpx
import pytest
import redis

from gateway.store.backend import open_store
from gateway.store.observer import StoreObserver
from gateway.store.redis.keys import tag
from gateway.store.redis.limits import RedisLimits
from gateway.store.redis.link import RedisLink
from gateway.store.redis.url import parse
from gateway.store.responses import ResponseStore
from gateway.store.rollouts import RolloutStore
from gateway.store.sessions import Session, SessionStore
from tests.store.test_state_contract import call, state
from tests.store.test_two_gateways import (
    FIRST,
    GENERATE,
    assert_exact,
    codex_turn,
    next_history,
    tool_call,
    two_gateways,
)
from tests.support.fake_vllm import FakeVLLM
from tests.support.gateway_process import gateway_process
from tests.support.gateway_server import free_port
from tests.support.redis_topologies import RedisClusterSet, RedisSentinelSet

on_the_session_loop = pytest.mark.asyncio(loop_scope="session")  # the loop the async fixtures run in


# -- URLs --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "why"), [
    ("unix:///tmp/r.sock?cluster=true", "a Redis Cluster is reached over TCP"),
    ("redis://h:6379/2?cluster=true", "a Redis Cluster has database 0 only, not 2"),
    ("redis://h:6379?cluster=maybe", "cluster='maybe': expected true or false"),
    ("redis://h:6379?clustr=true", "unknown option 'clustr'"),
    ("redis://h:6379?socket_timeout=soon", "socket_timeout='soon' is not valid"),
    ("redis://h:notaport/0", "'notaport' is not a port"),
    ("redis://h1:6379,h2:6379/0", "several hosts are a cluster's seeds (add ?cluster=true)"),
    ("redis+sentinel://h1:26379,h2:26379", "no master name"),
    ("redis+sentinel://h1:26379/mymaster?cluster=true", "cluster=true and Sentinel exclude each other"),
    ("redis://h:6379/zero", "the database must be a number, not 'zero'"),
    ("http://h:6379", "the scheme must be one of"),
    ("redis://:secret@h:6379/0?nope=1", "unknown option 'nope'"),
])
def test_a_url_the_gateway_cannot_use_says_what_is_wrong(url, why):
    with pytest.raises(ValueError) as raised:
        parse(url)
    assert why in str(raised.value) and "secret" not in str(raised.value)


def test_urls_of_each_topology_are_understood():
    cluster = parse("redis://:pw@10.0.0.1:7000,10.0.0.2:7001?cluster=true&max_connections=64")
    assert (cluster.topology, cluster.nodes, cluster.password, cluster.options) == (
        "cluster", (("10.0.0.1", 7000), ("10.0.0.2", 7001)), "pw", {"max_connections": 64})
    sentinel = parse("redis+sentinel://:pw@s1,s2:26380/mymaster/3?sentinel_password=spw")
    assert (sentinel.topology, sentinel.nodes, sentinel.master, sentinel.db, sentinel.password,
            sentinel.sentinel_password) == ("sentinel", (("s1", 26379), ("s2", 26380)), "mymaster", 3, "pw", "spw")
    single = parse("redis://h:6379/1?cluster=false&max_connections=8")
    assert (single.topology, single.url, single.db) == ("single", "redis://h:6379/1?max_connections=8", 1)
    assert parse("unix:///run/redis.sock?cluster=false").url == "unix:///run/redis.sock?"  # redis-py takes it whole


def test_serve_with_a_state_url_it_cannot_use_stops_at_start_saying_why(qwen_tokenizer_dir):
    command = [sys.executable, "-m", "gateway", "serve", "--upstream", "http://127.0.0.1:9", "--model",
               str(qwen_tokenizer_dir), "--port", str(free_port()), "--state-url", "unix:///tmp/r.sock?cluster=true"]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "--state-url 'unix:///tmp/r.sock?cluster=true' cannot be used: a Redis Cluster is reached over TCP" \
        in done.stderr


def test_hash_tags_keep_an_id_whole_and_distinct():
    assert tag("thread-1") == "{thread-1}"
    assert tag("a}b{c") == "{a%7Db%7Bc}" != tag("a%7Db%7Bc") == "{a%257Db%257Bc}"
    assert tag("") == "{%}"
    with pytest.raises(ValueError, match="must not contain braces"):
        open_store("redis://h:6379/0", SessionStore(), ResponseStore(), RolloutStore(), key_prefix="{gw}:")


def test_the_urls_socket_timeout_is_every_calls_deadline():
    """redis-py's own URL option: the socket's timeout and the whole call's deadline are one."""
    assert RedisLink("redis://h:6379/0", StoreObserver()).timeout == 0.5
    link = RedisLink("redis://h:6379/0?socket_timeout=2.5", StoreObserver())
    assert link.timeout == 2.5 and link.client.connection_pool.connection_kwargs["socket_timeout"] == 2.5


# -- the cluster: slots and masters ---------------------------------------------------------------

@on_the_session_loop
async def test_sessions_spread_over_the_masters_and_each_ones_keys_share_a_slot(redis_cluster: RedisClusterSet):
    prefix = f"spread{time.monotonic_ns()}:"
    store = open_store(redis_cluster.url, SessionStore(), ResponseStore(), RolloutStore(), key_prefix=prefix)
    try:
        for i in range(30):
            await store.put_session(f"thread-{i}", Session(state([1, 2, 3, i, 7])))
            await store.put_session(f"thread-{i}", Session(state([1, 2, 3, i, 7, 8, 9])))  # appended to its log
            await call(store, f"rollout-{i}", [1, 2], [3])
        masters = Counter()
        for master in redis_cluster.masters():
            client = redis_cluster.client(master)
            keys = [k.decode() for k in client.scan_iter(match=f"{prefix}*", count=1000)]
            masters[master] = len(keys)
            for key in keys:  # every key of one session or rollout lives with its header
                header = key if key.count(":") == 2 else key.rpartition(":")[0]
                assert client.cluster("keyslot", key) == client.cluster("keyslot", header)
        assert sum(masters.values()) == 30 * 2 + 30 * 5  # a header and a log per session; 5 keys per rollout
        assert len(masters) == 3 and min(masters.values()) > 20  # all three masters hold some
        figures = await store.figures()
        assert sorted(figures["nodes"]) == sorted(f"127.0.0.1:{port}" for port in redis_cluster.masters())
    finally:
        await store.close()


@on_the_session_loop
async def test_tenant_limits_hold_across_two_processes_on_the_cluster(redis_cluster: RedisClusterSet):
    prefix = f"limits{time.monotonic_ns()}:"
    links = [RedisLink(redis_cluster.url, StoreObserver()) for _ in range(2)]
    first, second = (RedisLimits(link, prefix, window=60) for link in links)
    try:
        assert await first.take("alice", 1, None) is None
        assert await second.take("alice", 1, None) == ("concurrency", 1)  # the one slot is taken on the other
        assert await second.take("bob", 1, None) is None  # another tenant, maybe another master
        await first.give_back("alice", 40)
        assert await second.take("alice", 1, 30) == ("tokens", pytest.approx(60, abs=1))  # 40 of 30 spent
        first.process = "a-process-that-died"  # its count stays until its liveness key lapses
        assert await first.take("carol", 1, None) is None
        redis_cluster.client(redis_cluster.master_of("{carol}")).delete(f"{prefix}t:{{carol}}:p:a-process-that-died")
        assert await second.take("carol", 1, None) is None  # the dead process's slot was dropped
    finally:
        for limits, link in zip((first, second), links, strict=True):
            limits.close()
            await link.close()


def test_two_gateway_processes_alternate_a_session_on_the_cluster_exactly(
        qwen_tokenizer_dir, tokenizer, redis_cluster: RedisClusterSet, tmp_path):
    with FakeVLLM(max_model_len=16384) as fake, \
            gateway_process(qwen_tokenizer_dir, [fake.url], tmp_path / "a.log", "--state-url",
                            redis_cluster.url) as (a, _), \
            gateway_process(qwen_tokenizer_dir, [fake.url], tmp_path / "b.log", "--state-url",
                            redis_cluster.url) as (b, _):
        history = FIRST
        key = f"alternating-{time.monotonic_ns()}"
        for step in range(6):
            fake.queue(tool_call(tokenizer, step))
            history = next_history(history, codex_turn((a, b)[step % 2], history, key=key), step)
        prompts = [body["token_ids"] for body in fake.bodies(GENERATE)]
        assert_exact(prompts, tokenizer, range(6))
        metrics = httpx.get(a + "/metrics").text
    state_lines = "\n".join(line for line in metrics.splitlines() if line.startswith("gateway_state"))
    assert 'gateway_state_session_reads_total{how="suffix"} 2.0' in metrics, state_lines  # B wrote in between
    assert 'gateway_non_monotonic_prompts_total{api="responses_http"}' not in metrics or \
        'gateway_non_monotonic_prompts_total{api="responses_http"} 0.0' in metrics
    assert sum(f'gateway_state_store_node_keys{{node="127.0.0.1:{port}"}}' in metrics
               for port in redis_cluster.masters()) == 3


# -- failover ------------------------------------------------------------------------------------

def test_a_session_continues_exactly_after_its_master_is_killed_and_degrades_when_none_is_left(
        qwen_tokenizer_dir, tokenizer):
    with RedisClusterSet() as cluster, two_gateways(qwen_tokenizer_dir, cluster) as gateways:
        a, b = gateways.urls
        history, other = FIRST, FIRST
        for step in range(2):
            gateways.fake.queue(tool_call(tokenizer, step))
            history = next_history(history, codex_turn((a, b)[step % 2], history, key="failover"), step)
        master = cluster.master_of(tag("failover"))
        replica = cluster.replica_of(master)
        other_key = next(k for k in (f"elsewhere-{i}" for i in range(100))
                         if cluster.master_of(tag(k)) != master)
        gateways.fake.queue(tool_call(tokenizer, 0))
        other = next_history(other, codex_turn(b, other, key=other_key), 0)
        cluster.wait_replicated(master)  # what the master acknowledged is on its replica
        cluster.kill(master)  # kill -9
        cluster.wait_promoted(replica)
        for step in (2, 3):  # A reads what B wrote from the promoted replica, then B A's turn
            gateways.fake.queue(tool_call(tokenizer, step))
            history = next_history(history, codex_turn((a, b)[step % 2], history, key="failover"), step)
        prompts = [body["token_ids"] for body in gateways.fake.bodies(GENERATE)]
        assert_exact([*prompts[:2], *prompts[3:]], tokenizer, range(4))

        cluster.kill(replica)  # the promoted one too: its slots have no master left
        gateways.fake.queue(tool_call(tokenizer, 4), tool_call(tokenizer, 1))
        answer = codex_turn(a, history, key="failover")  # B wrote the last turn: A must read it, and cannot
        history = next_history(history, answer, 4)
        other = next_history(other, codex_turn(a, other, key=other_key), 1)  # a session on a live master
        prompts = [body["token_ids"] for body in gateways.fake.bodies(GENERATE)]
        assert_exact([prompts[2], prompts[-1]], tokenizer, range(1))  # still exact
        metrics = httpx.get(a + "/metrics").text
        assert 'gateway_non_monotonic_prompts_total{api="responses_http"} 1.0' in metrics  # flagged, not failed
        registry = gateways.registries[0]
        assert registry.get_sample_value("gateway_state_store_node_errors_total",
                                         {"node": f"127.0.0.1:{replica}", "reason": "unreachable"}) >= 1


def test_a_session_continues_exactly_after_sentinel_fails_the_master_over(
        qwen_tokenizer_dir, tokenizer, redis_sentinel: RedisSentinelSet):
    sentinel = redis_sentinel  # the run's own: its promoted replica serves the tests after this one
    with two_gateways(qwen_tokenizer_dir, sentinel) as gateways:
        a, b = gateways.urls
        history = FIRST
        for step in range(2):
            gateways.fake.queue(tool_call(tokenizer, step))
            history = next_history(history, codex_turn((a, b)[step % 2], history, key="sentinel"), step)
        sentinel.wait_replicated()
        promoted = sentinel.kill_master()  # kill -9
        sentinel.wait_switched(promoted)
        for step in (2, 3):
            gateways.fake.queue(tool_call(tokenizer, step))
            history = next_history(history, codex_turn((a, b)[step % 2], history, key="sentinel"), step)
        prompts = [body["token_ids"] for body in gateways.fake.bodies(GENERATE)]
        assert_exact(prompts, tokenizer, range(4))
        assert redis.Redis(port=promoted).dbsize() > 0
        metrics = httpx.get(a + "/metrics").text  # the store's figures name the master the sentinels name now
        assert f'gateway_state_store_node_keys{{node="127.0.0.1:{promoted}"}}' in metrics
