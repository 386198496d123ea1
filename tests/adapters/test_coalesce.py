"""Tokens read at once go out as one delta per item: `coalesce` merges, never reorders."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.adapters._generation import coalesce
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted

deltas = st.builds(ItemDelta, st.integers(0, 2), st.text(max_size=3))
others = st.one_of(st.builds(ItemStarted, st.integers(0, 2), st.just("text")),
                   st.builds(ItemDone, st.integers(0, 2), st.text(max_size=3)))


def runs(events: list) -> list:
    """The events with each run of deltas to one item as (index, joined text)."""
    out: list = []
    for event in events:
        if isinstance(event, ItemDelta) and out and isinstance(out[-1], tuple) and out[-1][0] == event.index:
            out[-1] = (event.index, out[-1][1] + event.text)
        else:
            out.append((event.index, event.text) if isinstance(event, ItemDelta) else event)
    return out


@given(st.lists(st.one_of(deltas, deltas, others), max_size=30))
def test_runs_of_deltas_merge_and_the_rest_keeps_its_order(events):
    merged = coalesce(events)
    assert [(e.index, e.text) if isinstance(e, ItemDelta) else e for e in merged] == runs(events)


def test_a_batch_of_one_is_passed_through():
    batch = [ItemDelta(0, "a")]
    assert coalesce(batch) is batch
    assert coalesce([ItemDelta(0, "a"), ItemDelta(0, "b"), ItemDelta(1, "c")]) == [ItemDelta(0, "ab"),
                                                                                   ItemDelta(1, "c")]
