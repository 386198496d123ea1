"""Checking a parser's item events against the contract every format's parser keeps."""

from __future__ import annotations

from gateway.formats.base import ItemDelta, ItemDone, ItemStarted


def items(events) -> list[tuple[str, str | None, str]]:
    """(kind, name, text) per item, checking the event contract on the way: indices in order,
    one ItemDone each, and the deltas adding up to the final text."""
    started: dict[int, ItemStarted] = {}
    deltas: dict[int, list[str]] = {}
    done: dict[int, str] = {}
    for event in events:
        if isinstance(event, ItemStarted):
            assert event.index == len(started) and event.index not in started
            started[event.index] = event
            deltas[event.index] = []
        elif isinstance(event, ItemDelta):
            assert event.index in started and event.index not in done
            deltas[event.index].append(event.text)
        else:
            assert isinstance(event, ItemDone) and event.index in started and event.index not in done
            done[event.index] = event.text
    assert done.keys() == started.keys()
    for index, text in done.items():
        assert "".join(deltas[index]) == text
    return [(started[i].kind, started[i].name, done[i]) for i in range(len(started))]
