"""Stop strings against their slow definition: for any token texts and stop strings, the
text let through is that of the tokens before the one in which the first match begins (all
of it when nothing matches), no delta ever shows text past that, and `cut` says how many
tokens are kept."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.formats.base import ItemDelta, ItemDone, ItemStarted
from gateway.pipeline._stop_strings import StopStrings

TEXTS = st.lists(st.text("abS T", min_size=1, max_size=3), max_size=25)
STOPS = st.lists(st.text("abST", min_size=1, max_size=4), min_size=1, max_size=4)


def _parser(texts: list[str]):
    """A parser whose token i writes texts[i] into one text item."""
    started = False

    def feed(ids):
        nonlocal started
        events = []
        for token in ids:
            if not started:
                events.append(ItemStarted(0, "text"))
                started = True
            events.append(ItemDelta(0, texts[token]))
        return events
    return feed


def _expected(texts: list[str], stops: list[str]) -> tuple[str, int | None]:
    whole = "".join(texts)
    matches = [at for stop in stops if (at := whole.find(stop)) >= 0]
    if not matches:
        return whole, None
    start, ends = min(matches), 0
    for i, text in enumerate(texts):
        ends += len(text)
        if ends > start:
            return "".join(texts[:i]), i
    raise AssertionError


@given(TEXTS, STOPS, st.integers(1, 4))
def test_the_text_ends_before_the_token_the_first_match_begins_in(texts, stops, batch):
    stop = StopStrings(stops, _parser(texts))
    events = []
    ids = list(range(len(texts)))
    for at in range(0, len(ids), batch):
        events += stop.feed(ids[at:at + batch])
        if stop.cut is not None:
            break
    if stop.cut is None and texts:
        events += stop.finish([ItemDone(0, "".join(texts))])
    text, cut = _expected(texts, stops)
    assert stop.cut == cut
    shown = "".join(e.text for e in events if isinstance(e, ItemDelta))
    assert shown == text
    if texts:
        assert [e.text for e in events if isinstance(e, ItemDone)] == [text]
