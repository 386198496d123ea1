"""Chat Completions `stop` strings, matched on the text the model writes as it streams.

vLLM matches stop strings only on text it detokenizes itself, and the gateway asks it for
token ids alone; so the gateway matches them on the parser's text, token by token. Text that
might still become the start of a stop string is held back, so a client never sees part of
one. On a match the generation ends there (the turn stops reading, which aborts the upstream
request), with finish_reason `stop`, and the turn is cut at a token boundary: the token in
which the match begins and every token after it are dropped from the record, and the text
is what the kept tokens wrote. So the text the client got, the ids recorded for the next
prompt (`TokenState`) and the logprobs all end at the same token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gateway.formats.base import ItemDelta, ItemDone, ItemStarted, ParseEvent

__all__ = ["StopStrings"]

Feed = Callable[[Sequence[int]], list[ParseEvent]]


class StopStrings:
    """Wraps a parser's `feed`: the same events, but text items end at the first stop string.
    `cut` is the number of output tokens to keep once one matched (None: none did)."""

    def __init__(self, stops: Sequence[str], feed: Feed) -> None:
        self._stops = [stop for stop in stops if stop]
        self._hold = max(map(len, self._stops), default=1) - 1  # chars that may start a match
        self._feed = feed
        self._position = 0  # output tokens fed so far
        self._text_items: set[int] = set()
        self._text: dict[int, str] = {}  # text item -> its text so far
        # text item -> held deltas: (delta, offset of its end in the item's text, token position)
        self._held: dict[int, list[tuple[ItemDelta, int, int]]] = {}
        self._kept: dict[int, str] = {}  # text item -> the text released so far
        self.cut: int | None = None
        self.matched: str | None = None  # the stop string that ended the turn (vLLM's `stop_reason`)

    def feed(self, ids: Sequence[int]) -> list[ParseEvent]:
        out: list[ParseEvent] = []
        for token in ids:
            position = self._position
            self._position += 1
            out += self._events(self._feed((token,)), position)
            if self.cut is not None:
                break
        return out

    def finish(self, events: list[ParseEvent]) -> list[ParseEvent]:
        """The parser's `finish()` events, through the same filter."""
        return self._events(events, self._position)

    def _events(self, events: list[ParseEvent], position: int) -> list[ParseEvent]:
        out: list[ParseEvent] = []
        for event in events:
            if isinstance(event, ItemStarted):
                if event.kind == "text":
                    self._text_items.add(event.index)
                    self._text[event.index], self._held[event.index], self._kept[event.index] = "", [], ""
                out.append(event)
            elif isinstance(event, ItemDelta) and event.index in self._text_items:
                out += self._delta(event, position)
                if self.cut is not None:
                    return out
            elif isinstance(event, ItemDone) and event.index in self._text_items:
                out += self._release(event.index, len(self._text[event.index]))
                out.append(event)
            else:
                out.append(event)
        return out

    def _delta(self, event: ItemDelta, position: int) -> list[ParseEvent]:
        index = event.index
        before = self._text[index]
        text = before + event.text
        self._text[index] = text
        self._held[index].append((event, len(text), position))
        start = max(0, len(before) - self._hold)
        found = [(at, stop) for stop in self._stops if (at := text.find(stop, start)) >= 0]
        if not found:
            return self._release(index, len(text) - self._hold)
        match, self.matched = min(found, key=lambda hit: hit[0])
        held = self._held[index]
        # The token in which the match begins: the first held delta ending past the match start.
        first_cut = next(i for i, (_, end, _) in enumerate(held) if end > match)
        self.cut = held[first_cut][2]
        kept = [delta for delta, _, at in held[:first_cut] if at < self.cut]
        self._held[index] = []
        self._kept[index] += "".join(delta.text for delta in kept)
        return [*kept, ItemDone(index, self._kept[index])]

    def _release(self, index: int, upto: int) -> list[ParseEvent]:
        """Held deltas whose text ends at or before `upto` (no stop string can reach back to them)."""
        held = self._held[index]
        n_free = 0
        while n_free < len(held) and held[n_free][1] <= upto:
            n_free += 1
        free, self._held[index] = held[:n_free], held[n_free:]
        self._kept[index] += "".join(delta.text for delta, _, _ in free)
        return [delta for delta, _, _ in free]
