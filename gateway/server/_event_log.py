"""A background response's events, kept so that a stream can start or resume on them.

OpenAI lets a client stream a `background: true` response as it runs and, after a dropped
connection, resume it: `GET /v1/responses/{id}?stream=true&starting_after=N` answers the
events after sequence number N, then the rest as they come. The response runs as a task
of the process that took it (gateway/server/routes/stored_responses.py), which appends
each batch of events here; any number of readers follow the log, none of them holds the
task up, and a reader that leaves does not stop it. Finished logs are kept for the last
`MAX_FINISHED` responses; a running one is always kept.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from gateway.core.push import Sink
from gateway.server.http import sse_event

__all__ = ["EventLog", "EventLogs"]

MAX_FINISHED = 256


class EventLog:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.done = False
        self._grew = asyncio.Event()

    def add(self, batch: list[dict[str, Any]]) -> None:
        self.events.extend(batch)
        self._wake()

    def close(self) -> None:
        self.done = True
        self._wake()

    async def follow(self, sink: Sink[bytes], after: int = -1) -> None:
        """The SSE bytes of the events numbered above `after` to `sink`, one write per batch,
        until the end."""
        at = next((i for i, event in enumerate(self.events) if event["sequence_number"] > after), len(self.events))
        while True:
            grew = self._grew
            if at < len(self.events):
                batch, at = self.events[at:], len(self.events)
                if (hold := sink(b"".join([sse_event(event) for event in batch]))) is not None:
                    await hold
            elif self.done:
                return
            else:
                await grew.wait()

    def _wake(self) -> None:
        self._grew.set()
        self._grew = asyncio.Event()


class EventLogs:
    """The logs of this process's background responses, by response id."""

    def __init__(self) -> None:
        self._logs: OrderedDict[str, EventLog] = OrderedDict()

    def open(self, response_id: str) -> EventLog:
        log = self._logs[response_id] = EventLog()
        return log

    def get(self, response_id: str) -> EventLog | None:
        return self._logs.get(response_id)

    def finished(self, response_id: str) -> None:
        log = self._logs.get(response_id)
        if log is None:
            return
        log.close()
        self._logs.move_to_end(response_id)
        finished = [key for key, each in self._logs.items() if each.done]
        for key in finished[:max(0, len(finished) - MAX_FINISHED)]:
            del self._logs[key]
