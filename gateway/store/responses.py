"""Earlier responses with their exact tokens, for `previous_response_id`.

Two stores hold them: `ResponseStore`, the responses created with `store: true`,
continuable from any connection or over HTTP; and `ResponseCache`, one WebSocket
connection's memory — the latest response of each lane (`stream_id`), kept for the
socket's life only, whatever `store` says. A failed turn evicts its lane, so a
continuation never builds on partial state.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from gateway.core.conversation import Conversation
from gateway.tokenfix.state import TokenState

__all__ = ["CachedResponse", "ResponseCache", "ResponseStore"]


@dataclass(slots=True)
class CachedResponse:
    response_id: str
    conversation: Conversation  # the whole history, the response's own output items included
    tokens: TokenState | None  # exact prompt + generated ids; None after a warmup (nothing generated)
    response: dict[str, Any] | None = None  # the Response object as answered (GET /v1/responses/{id})
    inputs: int | None = None  # conversation.items[:inputs] were its input, the rest its output


class ResponseStore:
    """Responses created with `store: true`, continuable by `previous_response_id` from any
    connection or over HTTP. In memory, least recently used first out past `max_entries`."""

    def __init__(self, max_entries: int = 1024) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, CachedResponse] = OrderedDict()

    def get(self, response_id: str) -> CachedResponse | None:
        entry = self._entries.get(response_id)
        if entry is not None:
            self._entries.move_to_end(response_id)
        return entry

    def put(self, entry: CachedResponse) -> None:
        self._entries[entry.response_id] = entry
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def delete(self, response_id: str) -> bool:
        """True when the response was there."""
        return self._entries.pop(response_id, None) is not None


class ResponseCache:
    """A connection's latest response per lane; `previous_response_id` may name the latest
    response of any lane (a new lane can fork another's conversation)."""

    def __init__(self, max_lanes: int = 32) -> None:
        self.max_lanes = max_lanes
        self._latest: dict[str | None, CachedResponse] = {}  # lane (stream_id) -> latest response

    def find(self, response_id: str) -> CachedResponse | None:
        return next((entry for entry in self._latest.values() if entry.response_id == response_id), None)

    def put(self, lane: str | None, entry: CachedResponse) -> None:
        self._latest.pop(lane, None)
        self._latest[lane] = entry
        while len(self._latest) > self.max_lanes:  # the least recently answered lane goes first
            del self._latest[next(iter(self._latest))]

    def evict(self, lane: str | None) -> None:
        self._latest.pop(lane, None)
