"""The state store's contract, run against every backend: in process, and a real Redis alone, as a
Redis Cluster (3 masters + 3 replicas) and behind Sentinel.

What one store answers after what was put into it — sessions, stored responses, rollouts —
must not depend on the backend; what only a shared store can do (a second process reads
what the first wrote, only the new tokens travel) is at the end, against Redis.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from redis.exceptions import OutOfMemoryError

from gateway.core.conversation import Conversation, Message, Tool, ToolCall
from gateway.core.errors import APIError
from gateway.store import backend
from gateway.store.backend import Store
from gateway.store.observer import StoreObserver
from gateway.store.responses import CachedResponse, ResponseStore
from gateway.store.rollouts import RolloutStore
from gateway.store.sessions import ResentPrefix, Session, SessionStore
from gateway.tokenfix.record import TurnRecord
from gateway.tokenfix.state import TokenState
from tests.support.redis_server import RedisServer
from tests.support.redis_topologies import state_url

pytestmark = pytest.mark.asyncio(loop_scope="session")  # the loop the async fixtures run in

EMPTY = Conversation(items=[])
HISTORY = Conversation(items=[Message(role="user", text="hi"), ToolCall(call_id="c1", name="ls", arguments="{}")],
                       instructions="Be brief.", tools=[Tool(name="ls", description="list")])


class Seen(StoreObserver):
    def __init__(self) -> None:
        self.reads: list[str] = []
        self.fallbacks: list[str] = []
        self.written = 0

    def session_read(self, how: str) -> None:
        self.reads.append(how)

    def fallback(self, reason: str) -> None:
        self.fallbacks.append(reason)

    def moved(self, direction: str, n_bytes: int) -> None:
        if direction == "write":
            self.written += n_bytes


def open_store(url: str | None, observer: StoreObserver | None = None, prefix: str = "gw:") -> Store:
    return backend.open_store(url, SessionStore(), ResponseStore(), RolloutStore(), observer=observer, key_prefix=prefix)


@pytest.fixture(params=["memory", "redis", "cluster", "sentinel"])
async def store(request) -> AsyncIterator[Store]:
    opened = open_store(state_url(request, request.param) if request.param != "memory" else None,
                        prefix=f"t{time.monotonic_ns()}:")  # a fresh namespace per test
    yield opened
    await opened.close()


def state(tokens: list[int], prompt_len: int | None = None) -> TokenState:
    prompt_len = len(tokens) - 1 if prompt_len is None else prompt_len
    return TokenState.build(HISTORY, list(HISTORY.items), tokens[:prompt_len], tokens[prompt_len:], {7})


def same_state(got: TokenState, want: TokenState) -> None:
    assert list(got.tokens) == list(want.tokens)
    assert (got.context, got.items, got.digest, got.prompt_len, got.prompt_items, got.prompt_turns,
            got.model_turns) == (want.context, want.items, want.digest, want.prompt_len, want.prompt_items,
                                 want.prompt_turns, want.model_turns)


# -- sessions ------------------------------------------------------------------------------

async def test_a_session_comes_back_as_it_was_put(store: Store):
    resent = ResentPrefix(start=10, end=99, digest=b"\x01" * 16, items=2, instructions_end=0, instructions_field=True)
    first = state([1, 2, 3, 7, 4, 5, 7])
    assert await store.session("k") is None
    await store.put_session("k", Session(first, resent))
    found = await store.session("k")
    assert found is not None
    same_state(found.state, first)
    assert found.resent == resent
    longer = state([1, 2, 3, 7, 4, 5, 7, 8, 9, 7, 2**31 - 1, 0])
    await store.put_session("k", Session(longer))
    found = await store.session("k")
    assert found is not None and found.resent is None
    same_state(found.state, longer)
    await store.discard_session("k")
    assert await store.session("k") is None


async def test_a_rewritten_history_replaces_the_session(store: Store):
    await store.put_session("k", Session(state([1, 2, 3, 4])))
    await store.put_session("k", Session(state([1, 9, 3])))  # does not extend: a new log
    found = await store.session("k")
    assert found is not None and list(found.state.tokens) == [1, 9, 3]


# -- stored responses ----------------------------------------------------------------------

async def test_a_stored_response_comes_back_and_can_be_deleted(store: Store):
    tokens = state([5, 6, 7, 8])
    await store.put_response(CachedResponse("resp_1", HISTORY, tokens))
    await store.put_response(CachedResponse("resp_2", EMPTY, None))
    found = await store.response("resp_1")
    assert found is not None and found.response_id == "resp_1"
    assert found.conversation == HISTORY
    same_state(found.tokens, tokens)
    warm = await store.response("resp_2")
    assert warm is not None and warm.tokens is None and warm.conversation == EMPTY
    assert await store.delete_response("resp_1") is True
    assert await store.response("resp_1") is None
    assert await store.delete_response("resp_1") is False
    assert await store.response("resp_404") is None


# -- rollouts ------------------------------------------------------------------------------

async def call(store: Store, rollout_id: str, prompt: list[int], output: list[int], *,
               continues: bool = True, mask: list[int] | None = None) -> None:
    """One call as the pipeline makes it: begin, check the rendered prompt, commit."""
    pending = await store.begin_rollout(rollout_id, mask)
    base = pending.prefix
    full = [*(base.tokens if base is not None and continues else []), *prompt]
    turn = TurnRecord(request_id="gw_test", model="m", conversation=Conversation([]), prompt_ids=full,
                      output_ids=output, logprobs=[-float(t) for t in output], finish_reason="stop",
                      spliced=continues and base is not None, non_monotonic=not continues and base is not None,
                      prefix=base, replica="http://replica-a", upstream_params={"temperature": 1.0,
                                                                               "stop_token_ids": [7]})
    pending.check(turn)
    await store.commit_rollout(pending, turn, TokenState.build(EMPTY, [], full, output))


CALLS = [([1, 2], [3], True, None), ([4], [5, 6], True, [0]), ([9, 9], [8], False, None), ([7], [6], True, [1])]


async def test_a_rollout_exports_every_call_the_same_from_either_backend(store: Store):
    reference = open_store(None)
    for prompt, output, continues, mask in CALLS:
        await call(store, "r1", prompt, output, continues=continues, mask=mask)
        await call(reference, "r1", prompt, output, continues=continues, mask=mask)
    got = await store.export_rollout("r1")
    assert got == await reference.export_rollout("r1")
    assert got["token_ids"] == [1, 2, 3, 4, 5, 6, 9, 9, 8, 7, 6]
    assert got["loss_mask"] == [0, 0, 1, 0, 1, 1, 0, 0, 1, 1, 1]
    assert [s["start"] for s in got["segments"]] == [0, 6]
    assert [t["non_monotonic"] for t in got["turns"]] == [False, False, True, False]
    # The audit trail of each call: which stop id ended it, where it ran, what was applied.
    assert [t["stop_token_id"] for t in got["turns"]] == [None, None, None, None]  # none ended on stop id 7
    assert {(t["replica"], t["request_id"]) for t in got["turns"]} == {("http://replica-a", "gw_test")}
    assert all(t["sampling"] == {"temperature": 1.0} for t in got["turns"])


async def test_n_samples_are_branches_that_start_as_copies_of_their_rollout(store: Store):
    await call(store, "p", [1, 2], [3])
    pending = await store.begin_rollout("p", None)
    base = list(pending.prefix.tokens)
    for i, output in enumerate(([4, 7], [5, 7])):
        branch = pending.branch(f"p:{i}")
        full = [*base, 9]
        turn = TurnRecord(request_id="gw_test", model="m", conversation=Conversation([]), prompt_ids=full,
                          output_ids=output, logprobs=[-1.0, -2.0], finish_reason="stop", spliced=True,
                          prefix=pending.prefix, upstream_params={"stop_token_ids": [7]})
        await store.commit_rollout(branch, turn, TokenState.build(EMPTY, [], full, output))
    parent = await store.export_rollout("p")
    assert parent["token_ids"] == [1, 2, 3] and len(parent["turns"]) == 1  # the parent is as it was
    for i, output in enumerate(([4, 7], [5, 7])):
        got = await store.export_rollout(f"p:{i}")
        assert got["token_ids"] == [1, 2, 3, 9, *output]
        assert got["loss_mask"] == [0, 0, 1, 0, 1, 1]
        assert got["logprobs"] == [None, None, -3.0, None, -1.0, -2.0]
        assert len(got["segments"]) == 1 and [t["stop_reason"] for t in got["turns"]] == [None, 7]


async def test_a_deleted_rollout_answers_410_and_an_unknown_one_404(store: Store):
    await call(store, "r2", [1], [2])
    await store.delete_rollout("r2")
    for ask in (store.export_rollout("r2"), store.begin_rollout("r2", None)):
        with pytest.raises(APIError) as gone:
            await ask
        assert gone.value.status == 410 and "deleted" in gone.value.message
    with pytest.raises(APIError) as missing:
        await store.export_rollout("never")
    assert missing.value.status == 404


async def test_a_wrong_response_mask_is_a_422_before_anything_is_recorded(store: Store):
    await call(store, "r3", [1, 2], [3])
    with pytest.raises(APIError) as wrong:
        await call(store, "r3", [4, 5], [6], mask=[0])
    assert wrong.value.status == 422
    assert (await store.export_rollout("r3"))["token_ids"] == [1, 2, 3]


# -- only a shared store: two processes ------------------------------------------------------

@pytest.fixture(params=["redis", "cluster", "sentinel"])
async def two(request) -> AsyncIterator[tuple[Store, Store, Seen, Seen]]:
    prefix = f"t{time.monotonic_ns()}:"
    seen_a, seen_b = Seen(), Seen()
    url = state_url(request, request.param)
    a, b = open_store(url, seen_a, prefix), open_store(url, seen_b, prefix)
    yield a, b, seen_a, seen_b
    await a.close()
    await b.close()


async def test_a_process_reads_only_the_header_or_the_missing_suffix(two):
    a, b, seen_a, seen_b = two
    history = list(range(1, 40_001))
    await a.put_session("k", Session(state(history)))
    found = await b.session("k")
    assert found is not None and list(found.state.tokens) == history and seen_b.reads == ["full"]
    # A's next turn appends only its new tokens…
    written = seen_a.written
    extended = history + [7, 8, 9]
    held = await a.session("k")
    assert held is not None and seen_a.reads == ["local"]
    await a.put_session("k", Session(state(extended)))
    assert seen_a.written - written < 1_000  # 3 tokens and the header's metadata, not 160 kB
    # …and B, holding the earlier tokens, reads only those.
    found = await b.session("k")
    assert found is not None and list(found.state.tokens) == extended and seen_b.reads == ["full", "suffix"]
    assert (await b.session("k")) is found and seen_b.reads[-1] == "local"


async def test_two_turns_committed_at_once_by_two_processes_do_not_interleave(two):
    a, b, _, seen_b = two
    await a.put_session("k", Session(state([1, 2, 3])))
    assert await b.session("k") is not None and await a.session("k") is not None
    await a.put_session("k", Session(state([1, 2, 3, 4, 5])))  # A's turn continues it first
    await b.put_session("k", Session(state([1, 2, 3, 6])))  # B's turn continued the same state
    assert seen_b.fallbacks == ["conflict"]
    for store in (a, b):
        found = await store.session("k")
        assert found is not None and list(found.state.tokens) == [1, 2, 3, 6]  # B's, whole: never 1 2 3 4 5 6


async def test_a_rollout_continued_from_two_processes_exports_whole_from_either(two):
    a, b, _, _ = two
    await call(a, "r", [1, 2], [3])
    await call(b, "r", [4], [5])
    await call(a, "r", [6], [7])
    want = [1, 2, 3, 4, 5, 6, 7]
    assert (await a.export_rollout("r"))["token_ids"] == want == (await b.export_rollout("r"))["token_ids"]


async def test_racing_rollout_calls_on_two_processes_make_a_new_segment(two):
    a, b, _, seen_b = two
    await call(a, "r", [1, 2], [3])
    first, second = await a.begin_rollout("r", None), await b.begin_rollout("r", None)
    for store, pending, new in ((a, first, [4]), (b, second, [5])):
        full = [*pending.prefix.tokens, *new]
        turn = TurnRecord(request_id="gw_race", model="m", conversation=Conversation([]), prompt_ids=full,
                          output_ids=[9], logprobs=[-1.0], finish_reason="stop", spliced=True, prefix=pending.prefix)
        await store.commit_rollout(pending, turn, TokenState.build(EMPTY, [], full, [9]))
    got = await b.export_rollout("r")
    assert got["token_ids"] == [1, 2, 3, 4, 9, 1, 2, 3, 5, 9]
    assert [t["non_monotonic"] for t in got["turns"]] == [False, False, True] and seen_b.fallbacks == ["conflict"]


async def test_a_full_redis_keeps_turns_going_without_it():
    with RedisServer(maxmemory="4mb") as full:
        for filler in range(1000):  # up to maxmemory: full
            try:
                full.command("SET", f"filler{filler}", "x" * 100_000)
            except OutOfMemoryError:
                break
        seen = Seen()
        a, b = open_store(full.url, seen), open_store(full.url)
        mine = state(list(range(200_000)))  # 800 kB: does not fit
        await a.put_session("k", Session(mine))  # no exception: the write failed softly
        assert seen.fallbacks == ["full"]
        assert await b.session("k") is None  # nothing half-written for another process
        held = await a.session("k")  # this process still continues its own turn exactly
        assert held is not None and held.state.tokens == mine.tokens
        await a.close()
        await b.close()
