"""The scoring rule and the router over it: the longest cached prefix, within the load bound."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.upstream import replica_load, routing
from gateway.upstream.prefix_index import chunk_keys
from gateway.upstream.router import DECISIONS, Router

C = 16


@dataclass(eq=False)
class Node:
    url: str
    inflight: int = 0
    requests: int = 0
    state: str = "ready"


def nodes(n: int) -> list[Node]:
    return [Node(f"http://10.0.0.{i}:8000") for i in range(n)]


views = st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 8), min_size=n, max_size=n), st.lists(st.integers(0, 9), min_size=n, max_size=n),
    st.lists(st.integers(0, 3), min_size=n, max_size=n), st.lists(st.integers(0, 3), min_size=n, max_size=n),
    st.none() | st.text(min_size=1, max_size=6), st.none() | st.integers(0, n - 1), st.booleans(),
    st.sampled_from([1.0, 1.25, 2.0]), st.integers(0, 2)))


@given(views)
def test_the_longest_prefix_within_the_bound_wins_and_ties_go_to_the_least_loaded(view):
    matched, loads, served, placed, key, last, placing, factor, tie = view
    replicas = nodes(len(matched))
    for replica, n in zip(replicas, served, strict=True):
        replica.requests = n
    sticky = replicas[last] if last is not None else None
    chosen, reason = routing.choose(replicas, matched, loads, key, tie=tie, sticky=sticky, placing=placing,
                                    placed=placed, load_factor=factor)
    i = replicas.index(chosen)
    bound = routing.capacity([Node("", inflight=load) for load in loads], factor) + routing.LOAD_SLACK
    room = [j for j in range(len(loads)) if loads[j] < bound]
    assert i in room
    if placing:  # a new branch: where the fewest were placed, then the longer prefix, the least loaded
        assert reason == "placed"
        assert (placed[i], -matched[i], loads[i]) == min((placed[j], -matched[j], loads[j]) for j in room)
        return
    best = max(matched[j] for j in room)
    equals = [j for j in room if matched[j] >= best - tie]  # as good as the best, give or take `tie`
    assert i in equals
    assert loads[i] == min(loads[j] for j in equals)
    lightest = [j for j in equals if loads[j] == loads[i]]
    if last in lightest:  # a continuing session stays where it was, all else equal
        assert i == last
    elif best > tie:  # then the longer prefix
        assert matched[i] == max(matched[j] for j in lightest)
    elif key is None:
        assert served[i] == min(served[j] for j in lightest)
    else:  # a short keyed prompt: the key's own consistent-hash order, from any process
        assert chosen is routing.ranked(key, [replicas[j] for j in lightest])[0]
    if best < max(matched) - tie:
        assert reason == "prefix-spilled"  # a longer prefix is on replicas over the bound
    else:
        assert reason == ("prefix" if best > tie else "session" if key is not None else "least-loaded")


def test_a_full_kv_cache_is_passed_over_while_another_has_room():
    a, b = nodes(2)
    assert routing.choose([a, b], [5, 0], [0, 0], kv_usage=[0.99, 0.2]) == (b, "prefix-spilled")
    assert routing.choose([a, b], [5, 0], [0, 0], kv_usage=[0.99, 0.99]) == (a, "prefix")


def group_prompt(group: int, sample: int, shared: int = 40 * C) -> list[int]:
    rng = random.Random(group)
    return [rng.randrange(150_000) for _ in range(shared)] + [group, sample, *range(3 * C)]


def test_grpo_groups_follow_their_prompt_and_load_stays_within_the_bound():
    """Four groups of 8, interleaved, each sample its own key (rollout id), all in flight."""
    router, replicas = Router(metrics_interval=0), nodes(2)
    for r in replicas:
        router.track(r.url)
    placed: dict[int, list[Node]] = {}
    order = [(g, s) for s in range(8) for g in range(4)]
    for group, sample in order:
        chosen = router.pick(replicas, f"rollout-{group}-{sample}", prompt_ids=group_prompt(group, sample))
        chosen.inflight += 1
        chosen.requests += 1
        placed.setdefault(group, []).append(chosen)
        total = sum(r.inflight for r in replicas)
        assert max(r.inflight for r in replicas) <= routing.capacity(replicas) or total <= 2
    spread = [len(set(map(id, members))) for members in placed.values()]
    assert sorted(spread) == [1, 1, 1, 1]  # each group on one replica…
    assert sorted(r.inflight for r in replicas) == [16, 16]  # …and the groups split evenly


def test_a_hot_prefix_spills_to_a_second_replica_instead_of_queueing():
    router, replicas = Router(metrics_interval=0), nodes(2)
    for r in replicas:
        router.track(r.url)
    chosen = []
    for sample in range(16):  # all in flight at once
        replica = router.pick(replicas, None, prompt_ids=group_prompt(0, sample))
        replica.inflight += 1
        chosen.append(replica)
    # The prompt's replica takes them while it holds less than ⌈1.25 × (m + 1) / 2⌉ + 4: the 14th
    # (m = 13, bound 13) spills; from then on both hold the prompt, and the less loaded gets it.
    home = chosen[0]
    assert chosen[:13] == [home] * 13 and chosen[13] is not home
    assert router.stats.decisions["prefix-spilled"] == 1 and router.stats.below_best == 1
    assert sorted(r.inflight for r in replicas) == [3, 13]


def test_a_continuing_session_stays_where_its_prefix_is():
    router, replicas = Router(metrics_interval=0), nodes(3)
    for r in replicas:
        router.track(r.url)
    history = list(range(1000, 1000 + 20 * C))
    first = router.pick(replicas, "session-1", prompt_ids=history)
    assert router.stats.decisions == {"placed": 1}  # nothing held yet: a new branch
    for turn in range(5):
        history += [7, turn] * C  # the answer and the next user message
        assert router.pick(replicas, "session-1", prompt_ids=history) is first
    assert router.stats.decisions == {"placed": 1, "prefix": 5}
    assert router.stats.matched_tokens == sum(len(range(1000, 1000 + 20 * C)) + 2 * C * t for t in range(5))


def test_a_session_turn_adding_a_long_tool_output_stays_where_its_history_is():
    """A Codex turn often adds more than the tie (one 3 KB tool output is ~800 tokens): still the
    session's continuation, not a new branch to place where the fewest were placed."""
    router, replicas = Router(metrics_interval=0), nodes(2)
    for r in replicas:
        router.track(r.url)
    history = list(range(1000, 1000 + 40 * C))
    first = router.pick(replicas, "session-1", prompt_ids=history)
    other = router.pick(replicas, "session-2", prompt_ids=list(range(5000, 5000 + 40 * C)))
    assert other is not first  # new sessions spread: `first` now has no fewer placements than `other`
    for turn in range(3):
        history += [7, turn] * (25 * C)  # the answer, then an 800-token tool output
        assert router.pick(replicas, "session-1", prompt_ids=history) is first
    assert router.stats.decisions == {"placed": 2, "prefix": 3}
    fresh = router.pick(replicas, "session-3", prompt_ids=history[: 40 * C] + [9] * (40 * C))
    assert router.stats.decisions["placed"] == 3  # another session sharing a prefix is still a new branch
    assert fresh in replicas


turns = st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(0, 3), max_size=5 * C),
                           st.lists(st.integers(0, 3), max_size=2 * C)), min_size=1, max_size=14)


@given(turns, st.integers(2, 40))
def test_a_sessions_keys_carried_from_turn_to_turn_route_as_keys_made_afresh(turns, capacity):
    """Two routers see the same sessions' turns (a new tail each, then the model's answer), one
    keying each prompt after the session's last prompt and its keys, as the gateway does, the
    other from scratch: every decision and every count is the same, small indexes evicting too."""
    carried, afresh, replicas = Router(metrics_interval=0), Router(metrics_interval=0), nodes(3)
    for router in (carried, afresh):
        for r in replicas:
            router.track(r.url)
            router.update_load(r.url, replica_load.ReplicaLoad(capacity_tokens=capacity * C))
    sessions: dict[int, tuple[list[int], object]] = {}
    for session, tail, answer in turns:
        tokens, keys = sessions.get(session, ([9] * (2 * C), None))
        prompt = tokens + tail
        made = carried.prompt_keys(prompt, after=(tokens, keys) if keys is not None else None)
        chosen = carried.pick(replicas, f"s{session}", keys=made)
        assert chosen is afresh.pick(replicas, f"s{session}", prompt_ids=prompt)
        assert carried.stats == afresh.stats
        sessions[session] = (prompt + answer, made)


def test_each_decision_is_reported_to_the_request_it_was_made_for():
    router, replicas = Router(metrics_interval=0), nodes(2)
    for r in replicas:
        router.track(r.url)
    decisions: list = []
    token = DECISIONS.set(decisions)
    try:
        router.pick(replicas, None, prompt_ids=list(range(20 * C)))
        router.pick(replicas, None, prompt_ids=list(range(20 * C + 3)))
    finally:
        DECISIONS.reset(token)
    assert [(d.reason, d.matched, d.best) for d in decisions] == [("placed", 0, 0), ("prefix", 20 * C, 20 * C)]


def test_the_comparison_modes():
    replicas = nodes(3)
    rr = Router("round-robin", metrics_interval=0)
    assert [rr.pick(replicas).url for _ in range(4)] == [replicas[i].url for i in (1, 2, 0, 1)]
    replicas[0].inflight = 2
    assert Router("least-loaded", metrics_interval=0).pick(replicas) is replicas[1]
    assert Router("session", metrics_interval=0).pick(replicas, "k") is routing.pick(replicas, "k")


# vLLM 0.32's /metrics, the lines the router reads (captured from the CPU build, two engines).
METRICS = """\
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
process_start_time_seconds 1.79571117357e+09
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny"} 1.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 16.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="capacity"} 16.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.5
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 4096.0
vllm:prefix_cache_queries_total{engine="1",model_name="tiny"} 1024.0
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 2048.0
vllm:prefix_cache_hits_total{engine="1",model_name="tiny"} 512.0
vllm:external_prefix_cache_hits_total{engine="0",model_name="tiny"} 7.0
vllm:cache_config_info{block_size="128",enable_prefix_caching="True",engine="0",kv_cache_size_tokens="2097152",\
num_gpu_blocks="16384"} 1.0
"""


def test_a_replicas_metrics_give_its_load_capacity_and_start():
    load = replica_load.parse(METRICS)
    assert (load.running, load.waiting, load.kv_usage) == (4, 16, 0.5)
    assert (load.capacity_tokens, load.block_size, load.started_at) == (2_097_152, 128, 1.79571117357e9)
    assert (load.prefix_queries, load.prefix_hits) == (5120, 2560)  # the status page's hit rate: 50 %
    assert replica_load.parse(METRICS.replace('kv_cache_size_tokens="2097152",', "")).capacity_tokens == 2_097_152


def test_the_reported_queue_counts_as_load_and_a_restart_forgets_the_cache():
    router, replicas = Router(metrics_interval=0), nodes(2)
    for r in replicas:
        router.track(r.url)
    prompt = list(range(40 * C))
    home = router.pick(replicas, None, prompt_ids=prompt)
    view = router.views[home.url]
    router.update_load(home.url, replica_load.parse(METRICS))  # what its /metrics poll hands over
    assert view.sent.capacity == 2_097_152 // C
    # Sixteen waiting in its queue (from other gateways), over the bound (⌈1.25 × 17 / 2⌉ + 4 = 15):
    # the prompt goes elsewhere despite its prefix.
    assert router.pick(replicas, None, prompt_ids=prompt) is not home
    router.update_load(home.url, replica_load.parse(METRICS.replace("1.79571117357e+09", "1.8e+09")))
    assert view.sent.match(chunk_keys(prompt, C)) == 0  # restarted: its cache is empty


def test_kv_event_endpoints_per_replica_from_a_template_or_by_name():
    router = Router(metrics_interval=0, kv_events=["tcp://{host}:5557,tcp://{host}:5558",
                                                   "http://127.0.0.1:8001=tcp://127.0.0.1:6001"])
    for url in ("http://10.0.0.7:8000", "http://127.0.0.1:8001"):
        router.track(url)
    events = {url: view.events for url, view in router.views.items()}
    assert (events["http://10.0.0.7:8000"].endpoint, events["http://10.0.0.7:8000"].replay_endpoint) == (
        "tcp://10.0.0.7:5557", "tcp://10.0.0.7:5558")
    assert (events["http://127.0.0.1:8001"].endpoint, events["http://127.0.0.1:8001"].replay_endpoint) == (
        "tcp://127.0.0.1:6001", None)  # named: its own spec wins over the template
    with pytest.raises(ValueError, match="ZMQ address"):
        Router(kv_events=["http://127.0.0.1:8001=127.0.0.1:6001"])


def test_with_events_live_a_replica_holds_what_they_report_and_what_it_was_sent_since():
    router, replicas = Router(metrics_interval=0, kv_events=["tcp://{host}:5557"]), nodes(2)
    for r in replicas:
        router.track(r.url)
    a, b = (router.views[r.url] for r in replicas)
    reported = list(range(40 * C))
    a.blocks.stored([1], None, reported, len(reported))  # 40 chunks, as vLLM's events re-keyed
    a.events.live = b.events.live = True
    assert router.pick(replicas, None, prompt_ids=reported + [5] * 20 * C) is replicas[0]
    assert len(a.sent) == 20  # only the part the events have not reported is held as sent
    replicas[0].requests += 1  # (the pool counts what it sends)
    a.blocks.removed([1])  # evicted: the events say so, and the router believes them
    assert router.pick(replicas, None, prompt_ids=reported) is replicas[1]  # where fewer requests went
