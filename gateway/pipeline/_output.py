"""A turn's output as the replica streams it: recorded, parsed, cut at a stop string.

`Turn.relay()` hands each chunk of token ids to `TurnOutput.take`, which writes the ids,
logprobs and finish into the turn's record, feeds them through the format's parser (and the
request's stop strings), and collects the finished items as the turn's canonical output.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from gateway.core.ids import new_id
from gateway.core.sampling import OutputConstraint
from gateway.formats.base import ChatFormat, ItemDelta, ItemDone, ItemStarted, ParseEvent, output_item
from gateway.pipeline._call_limit import CallLimit
from gateway.pipeline._stop_strings import StopStrings
from gateway.tokenfix.record import TurnRecord
from gateway.upstream.chunks import TokenChunk, Usage

__all__ = ["TurnOutput"]


class TurnOutput:
    """A turn's output, taken chunk by chunk: ids, logprobs and finish into the record, the ids
    through the parser (and stop strings), started and finished items tracked."""

    def __init__(self, record: TurnRecord, chat_format: ChatFormat, spans: bool, stop: Sequence[str] | None,
                 constraint: OutputConstraint | None = None) -> None:
        """`spans`: mark each delta with the output positions that made it (logprobs); `stop`:
        the request's stop strings; `constraint`: its call limit, if any, is held here too."""
        self._record = record
        self._parser = parser = chat_format.parser(record.conversation.tools, thinking=record.conversation.thinking)
        self._started: dict[int, ItemStarted] = {}
        feed = _spans(parser.feed) if spans and record.logprobs is not None else parser.feed
        limit = constraint.max_calls if constraint is not None else None
        self._calls = CallLimit(limit, feed) if limit is not None else None
        feed = self._calls.feed if self._calls is not None else feed
        self._stops = StopStrings(stop, feed) if stop else None
        self._feed = self._stops.feed if self._stops is not None else feed
        self.stopped = False  # a stop string matched: the turn ends here
        self.steered = False  # a steer stopped the turn here (gateway/pipeline/steering.py)
        self._steering = False  # a steer waits for the tool call being written to end

    def take(self, chunk: TokenChunk | Usage) -> list[ParseEvent]:
        record = self._record
        if type(chunk) is Usage:
            record.usage = chunk
            return []
        ids = chunk.token_ids
        if record.first_token_at is None and ids:
            record.first_token_at = time.perf_counter()
        record.output_ids.extend(ids)
        if record.logprobs is not None and chunk.logprobs is not None:
            record.logprobs.extend(chunk.logprobs)
        if record.top_logprobs is not None:
            record.top_logprobs.extend(chunk.top_logprobs or [[] for _ in ids])
        if chunk.finish_reason is not None:
            record.finish_reason = chunk.finish_reason
        if chunk.expanded_prompt is not None:
            record.expanded(chunk.expanded_prompt, chunk.mm_placeholders)
        events = self._feed(ids) if not self._steering else self._feed_to_call_end(ids)
        record.reasoning_tokens = self._parser.reasoning_tokens
        stops = self._stops
        if stops is not None and stops.cut is not None:
            self._cut(stops.cut)
            record.stop_string = stops.matched
            self.stopped = True
        calls = self._calls
        if calls is not None and calls.cut is not None and not self.stopped:
            self._cut(calls.cut)
            self.stopped = True
        for event in events:
            if type(event) is not ItemDelta:  # most are: nothing to track
                self._track(event)
        return events

    def steer(self) -> bool:
        """A steer asks the turn to stop with the ids taken so far; True when it stops now,
        False when it waits for the tool call being written to end (checked after each read)."""
        self._steering = True
        return self._steer_now()

    def _steer_now(self) -> bool:
        if self.stopped or self.steered:
            return self.steered
        if self._in_call({i for i, started in self._started.items() if started.kind == "tool_call"}):
            return False
        self._steered()
        return True

    def _steered(self) -> None:
        self.steered, self._steering = True, False
        if self._record.finish_reason is None:  # one that finished first keeps its own reason
            self._record.finish_reason = "steered"

    def _in_call(self, open_calls: set[int]) -> bool:
        """A tool call is being written: one whose item started, or (a parser that starts a call's
        item only at its end says so) one whose markup opened."""
        return bool(open_calls) or getattr(self._parser, "in_tool_call", False)

    def _feed_to_call_end(self, ids: Sequence[int]) -> list[ParseEvent]:
        """A steer waits for the tool call being written: the ids one at a time, the output cut
        where the call ends (what the model wrote after it was never the client's)."""
        events: list[ParseEvent] = []
        open_calls = {i for i, started in self._started.items() if started.kind == "tool_call"}
        for n, token in enumerate(ids, 1):
            for event in self._feed((token,)):
                events.append(event)
                if isinstance(event, ItemStarted) and event.kind == "tool_call":
                    open_calls.add(event.index)
                elif isinstance(event, ItemDone):
                    open_calls.discard(event.index)
            if not self._in_call(open_calls) and not self.stopped:
                if n < len(ids):
                    self._cut(len(self._record.output_ids) - len(ids) + n)
                    self._record.finish_reason = None
                self._steered()
                break
        return events

    def finish(self) -> list[ParseEvent]:
        """The parser's last events, once the replica finished."""
        events = self._parser.finish()
        if self._calls is not None:
            events = self._calls.finish(events)
        if self._stops is not None:
            events = self._stops.finish(events)
        for event in events:
            self._track(event)
        return events

    def _cut(self, keep: int) -> None:
        """A stop string matched: the turn ends with the first `keep` output tokens."""
        record = self._record
        del record.output_ids[keep:]
        if record.logprobs is not None:
            del record.logprobs[keep:]
        if record.top_logprobs is not None:
            del record.top_logprobs[keep:]
        record.finish_reason = "stop"

    def _track(self, event: ParseEvent) -> None:
        """Give tool calls their ids and collect finished items as canonical output."""
        if isinstance(event, ItemStarted):
            if event.kind == "tool_call" and not event.call_id:  # Kimi's calls carry their own ids
                event.call_id = new_id("call")
            self._started[event.index] = event
        elif isinstance(event, ItemDone):
            self._record.output_items.append(output_item(self._started.pop(event.index), event.text))


def _spans(feed: Callable[[Sequence[int]], list[ParseEvent]]) -> Callable[[Sequence[int]], list[ParseEvent]]:
    """`feed` one token at a time, marking each delta with the output positions of the tokens
    that made it (for logprobs): tokens that produced nothing yet (part of a character) count
    with the next delta; markup (an item starting or ending without a delta) with none."""
    pending = 0  # output position of the first token no delta has taken yet
    position = 0  # output tokens fed so far

    def fed(ids: Sequence[int]) -> list[ParseEvent]:
        nonlocal pending, position
        events: list[ParseEvent] = []
        for token in ids:
            position += 1
            produced = feed((token,))
            for event in produced:
                if isinstance(event, ItemDelta):
                    event.span = (pending, position)
                    pending = position
                else:
                    pending = max(pending, position - 1)
            if produced:
                pending = position
                events += produced
        return events
    return fed
