"""Prefix-aware routing through the real gateway, in front of two scripted replicas.

Streams are held open (the scripted replicas hang after one token), so every request stays
in flight while the next is routed: where each went is read off the replicas' own request
logs, the load off the gateway's count."""

from __future__ import annotations

import contextlib
import logging
import math

import httpx
import pytest

from gateway.upstream.prefix_index import chunk_keys
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.stack import fake_stack

GENERATE = "/inference/v1/generate"


@pytest.fixture
def stack(qwen_tokenizer_dir):
    with fake_stack(qwen_tokenizer_dir, replicas=2, served_model_name="tiny-qwen3") as stack:
        yield stack


def task(n: int) -> str:
    """A group's shared prompt: a few hundred tokens of its own."""
    return f"Task {n}: " + " ".join(f"step{n}-{i} check the invariant of part {i}" for i in range(60))


def sent(stack) -> list[int]:
    return [len(fake.bodies(GENERATE)) for fake in stack.fakes]


def went_to(stack, before: list[int]) -> int:
    """The replica that got the one request made since `before = sent(stack)`."""
    (replica,) = [i for i, (was, now) in enumerate(zip(before, sent(stack), strict=True)) if now > was]
    return replica


@contextlib.contextmanager
def held_open(stack, tokenizer):
    """Replicas answer one token, then hang until the client leaves: every stream opened meanwhile
    stays in flight. Leaving closes them all."""
    for fake in stack.fakes:
        fake.queue(*[Script(ids(tokenizer, "ok"), hang=True) for _ in range(40)])
    streams = []

    def open_stream(system: str, user: str, **extra) -> int:
        """Open one streaming chat; returns the index of the replica that got it."""
        before = sent(stack)
        stream = stack.client().chat.completions.create(
            model="tiny-qwen3", stream=True, max_tokens=8,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}], extra_body=extra)
        streams.append(stream)
        next(iter(stream))  # the first token: the replica has the request
        return went_to(stack, before)

    try:
        yield open_stream
    finally:
        for stream in streams:
            stream.close()


def inflight(stack) -> list[int]:
    return [r.inflight for r in stack.runtime.pool.replicas]


def test_group_members_follow_their_prompt_to_one_replica(stack, tokenizer):
    """Two GRPO-shaped groups of four, interleaved, each sample its own rollout id."""
    with held_open(stack, tokenizer) as open_stream:
        placed: dict[int, set[int]] = {0: set(), 1: set()}
        for sample, group in enumerate([0, 1, 1, 0, 0, 1, 1, 0]):  # not in the replicas' turn
            placed[group].add(open_stream(task(group), f"Attempt {sample}.", rollout_id=f"g{group}-s{sample}"))
        assert placed[0] != placed[1] and all(len(replicas) == 1 for replicas in placed.values())
        assert inflight(stack) == [4, 4]


def test_a_popular_prompt_spills_over_within_the_load_bound(stack, tokenizer):
    with held_open(stack, tokenizer) as open_stream:
        home = open_stream(task(7), "Attempt 0.")
        for sample in range(1, 16):
            before = sum(inflight(stack))
            open_stream(task(7), f"Attempt {sample}.")
            assert max(inflight(stack)) <= math.ceil(1.25 * (before + 1) / 2) + 4  # the bound, with its slack
        # 13 on the prompt's replica, then it is at the bound: the 14th spills, and once both hold
        # the prompt the less loaded takes it.
        assert inflight(stack)[home] == 13 and inflight(stack)[1 - home] == 3


def test_a_session_keeps_its_replica_and_its_exact_tokens(stack, tokenizer, caplog):
    """A Responses session (prompt_cache_key) continues on the replica that holds its prefix."""
    answer = ids(tokenizer, "Noted.") + [IM_END]
    for fake in stack.fakes:
        fake.queue(*[Script(answer) for _ in range(6)])
    history: list[dict] = [{"type": "message", "role": "system", "content": task(3)}]
    homes, prompts = [], []
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        for turn in range(3):
            history.append({"type": "message", "role": "user", "content": f"Step {turn}, please."})
            body = {"model": "tiny-qwen3", "input": history, "prompt_cache_key": "session-9"}
            before = sent(stack)
            response = httpx.post(stack.url + "/v1/responses", json=body, timeout=30).json()
            assert response["status"] == "completed"
            history.append({"type": "message", "role": "assistant", "content": "Noted."})
            homes.append(home := went_to(stack, before))
            prompts.append(stack.fakes[home].bodies(GENERATE)[-1]["token_ids"])
    assert len(set(homes)) == 1
    assert prompts[1][:len(prompts[0]) + len(answer)] == prompts[0] + answer  # the exact earlier tokens, spliced
    kept = stack.runtime.store.sessions.get("session-9").state  # the next turn keys only what follows its prompt
    assert kept.keys is not None and kept.keys.keys.tolist() == chunk_keys(prompts[2])
    routes = [r.fields["route"] for r in caplog.records if hasattr(r, "fields") and "route" in r.fields]
    held = [r.fields["route_prefix_tokens"] for r in caplog.records if hasattr(r, "fields") and "route" in r.fields]
    assert routes == ["placed", "prefix", "prefix"]
    assert held[0] == 0 and held[1] >= len(prompts[0]) // 16 * 16 - 16 and held[2] > held[1]
    metrics = httpx.get(stack.url + "/metrics").text
    assert 'gateway_routing_decisions_total{reason="prefix"} 2.0' in metrics
    assert f"gateway_routing_prefix_tokens_sum {float(held[1] + held[2])}" in metrics
    assert f'gateway_prefix_index_chunks{{replica="{stack.fakes[homes[0]].url}",source="sent"}} ' \
           f'{float(len(prompts[2]) // 16)}' in metrics
