"""RolloutStore on its own: segments, masks, eviction, expiry, tombstones, racing calls."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.conversation import Conversation
from gateway.core.errors import APIError
from gateway.store.rollouts import RolloutStore
from gateway.tokenfix.record import TurnRecord
from gateway.tokenfix.state import TokenState

EMPTY = Conversation(items=[])


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def call(store: RolloutStore, rollout_id: str, prompt: list[int], output: list[int], *, continues: bool = True,
         mask: list[int] | None = None, finish_reason: str = "stop"):
    """One call as the adapters make it: begin, check the rendered prompt, commit the result.
    With `continues`, the prompt is the rollout's tokens so far followed by `prompt`."""
    pending = store.begin(rollout_id, mask)
    base = pending.prefix
    full = [*(base.tokens if base is not None and continues else []), *prompt]
    turn = TurnRecord(request_id="gw_test", model="m", conversation=Conversation([]), prompt_ids=full,
                      output_ids=output, logprobs=[-float(t) for t in output], finish_reason=finish_reason,
                      spliced=continues and base is not None, non_monotonic=not continues and base is not None,
                      prefix=base, replica="http://replica-a", upstream_params={"temperature": 1.0,
                                                                               "stop_token_ids": [7]})
    pending.check(turn)
    return pending, turn


def commit(store: RolloutStore, rollout_id: str, prompt: list[int], output: list[int], **options) -> None:
    pending, turn = call(store, rollout_id, prompt, output, **options)
    pending.commit(turn, TokenState.build(EMPTY, [], turn.prompt_ids, output))


tokens = st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=8)


@given(st.lists(st.tuples(tokens, tokens, st.booleans()), min_size=1, max_size=8))
def test_export_is_every_call_prompt_and_generation_with_masks_and_logprobs(calls):
    store = RolloutStore()
    sent = []
    for prompt, output, continues in calls:
        before = store.get("r").state if sent else None
        commit(store, "r", prompt, output, continues=continues)
        full = [*(before.tokens if before is not None and continues else []), *prompt]
        sent.append((full, output))
    got = store.get("r").export()
    assert len(got["token_ids"]) == len(got["loss_mask"]) == len(got["logprobs"]) == got["num_tokens"]
    for turn, (prompt, output) in zip(got["turns"], sent):
        segment_start = got["segments"][turn["segment"]]["start"]
        assert got["token_ids"][segment_start:turn["prompt_end"]] == prompt
        assert got["token_ids"][turn["prompt_end"]:turn["end"]] == output
        assert got["loss_mask"][turn["start"]:turn["end"]] == [0] * (turn["prompt_end"] - turn["start"]) + [1] * len(
            output)
        assert got["logprobs"][turn["prompt_end"]:turn["end"]] == [-float(t) for t in output]
        assert set(got["logprobs"][turn["start"]:turn["prompt_end"]]) <= {None}
    new_segments = [i for i, (_, _, continues) in enumerate(calls) if i == 0 or not continues]
    assert [s["first_turn"] for s in got["segments"]] == new_segments
    assert [t["non_monotonic"] for t in got["turns"]] == [i in new_segments and i > 0 for i in range(len(calls))]
    assert got["segments"][-1]["end"] == got["num_tokens"]


def test_a_wrong_mask_length_names_expected_and_got_and_records_nothing():
    store = RolloutStore()
    commit(store, "r", [1, 2, 3], [4, 5])
    with pytest.raises(APIError) as error:
        call(store, "r", [6, 7], [8], mask=[0, 0, 0])
    assert error.value.status == 422 and "(expected 2, got 3)" in error.value.message
    assert "prompt and generation are 5 tokens and this prompt is 7" in error.value.message
    assert len(store.get("r").turns) == 1


def test_least_recently_used_rollouts_are_evicted_first_and_answer_410():
    store = RolloutStore(max_tokens=30)
    for name in ("a", "b", "c"):
        commit(store, name, [1] * 8, [2] * 2)
    store.get("a")  # exporting counts as use
    commit(store, "d", [1] * 8, [2] * 2)
    with pytest.raises(APIError) as error:
        store.begin("b")
    assert error.value.status == 410 and "evicted" in error.value.message and "it held 10" in error.value.message
    assert {name: store.get(name).num_tokens for name in ("a", "c", "d")} == {"a": 10, "c": 10, "d": 10}
    assert store.summary()["evicted"] == 1 and store.summary()["evicted_tokens"] == 10
    assert store.summary()["tokens"] == 30


def test_idle_rollouts_expire_with_a_410_and_unknown_ones_are_404():
    clock = Clock()
    store = RolloutStore(ttl=60, clock=clock)
    commit(store, "r", [1], [2])
    clock.now = 61
    with pytest.raises(APIError) as error:
        store.get("r")
    assert error.value.status == 410 and "expired after 60 s" in error.value.message
    assert store.summary()["expired"] == 1 and store.summary()["tokens"] == 0
    with pytest.raises(APIError) as error:
        store.get("never")
    assert error.value.status == 404


def test_a_call_that_raced_another_on_the_same_rollout_opens_a_flagged_segment():
    store = RolloutStore()
    commit(store, "r", [1, 2], [3])
    first, first_turn = call(store, "r", [4], [5], mask=[1])
    second, second_turn = call(store, "r", [6], [7], mask=[1])  # began before the first was recorded
    first.commit(first_turn, TokenState.build(EMPTY, [], first_turn.prompt_ids, [5]))
    second.commit(second_turn, TokenState.build(EMPTY, [], second_turn.prompt_ids, [7]))
    got = store.get("r").export()
    assert got["token_ids"] == [1, 2, 3, 4, 5, 1, 2, 3, 6, 7]
    assert [(t["segment"], t["non_monotonic"], t["mask_source"]) for t in got["turns"]] == [
        (0, False, "gateway"), (0, False, "client"), (1, True, "gateway")]
    assert got["loss_mask"] == [0, 0, 1, 1, 1, 0, 0, 0, 0, 1]  # the first mask was the client's [1]
