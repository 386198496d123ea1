"""`parallel_tool_calls: false` and `max_tool_calls`, held by the gateway too.

vLLM's structured outputs end a generation after the allowed calls (gateway/formats/
hf/constraints.py), but a replica may write more anyway: structured outputs turned off, an
older vLLM, a format whose grammar cannot say it. So the gateway counts the calls the parser
finishes; once the last allowed one is done, what follows is held back until it is known: the
end of the generation releases it, a further call ends the turn where the last allowed call
ended (the turn stops reading, which aborts the upstream request). The record is cut at that
token, so the calls the client got, the ids kept for the next prompt and the logprobs agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gateway.formats.base import ItemDone, ItemStarted, ParseEvent

__all__ = ["CallLimit"]

Feed = Callable[[Sequence[int]], list[ParseEvent]]


class CallLimit:
    """Wraps a parser's `feed`: the same events, but no tool call past the `limit`-th. `cut` is
    the number of output tokens to keep once one began (None: none did)."""

    def __init__(self, limit: int, feed: Feed) -> None:
        self._limit = limit
        self._feed = feed
        self._position = 0  # output tokens fed so far
        self._calls: set[int] = set()  # open tool-call items
        self._done = 0  # tool calls finished
        self._end = 0  # output tokens up to the end of the last allowed call
        self._held: list[ParseEvent] = []  # what came after it, until the next call or the end
        self.cut: int | None = None

    def feed(self, ids: Sequence[int]) -> list[ParseEvent]:
        out: list[ParseEvent] = []
        for token in ids:
            if self.cut is not None:
                break
            self._position += 1
            out += self._events(self._feed((token,)))
        return out

    def finish(self, events: list[ParseEvent]) -> list[ParseEvent]:
        """The parser's `finish()` events, through the same filter, and what was held."""
        out = self._events(events)
        if self.cut is not None:
            return out
        held, self._held = self._held, []
        return [*out, *held]

    def _events(self, events: list[ParseEvent]) -> list[ParseEvent]:
        out: list[ParseEvent] = []
        for event in events:
            if self._done >= self._limit:
                if isinstance(event, ItemStarted) and event.kind == "tool_call":
                    self.cut, self._held = self._end, []
                    return out
                self._held.append(event)
                continue
            out.append(event)
            if isinstance(event, ItemStarted) and event.kind == "tool_call":
                self._calls.add(event.index)
            elif isinstance(event, ItemDone) and event.index in self._calls:
                self._calls.discard(event.index)
                self._done += 1
                self._end = self._position
        return out
