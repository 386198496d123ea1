"""The connection's memory: the latest response of each lane, with its exact tokens.

`previous_response_id` may name the latest response of any lane (a new lane can fork
another's conversation). Nothing is stored beyond the socket's life, and a failed turn
evicts its lane, so a continuation never builds on partial state.
"""

from __future__ import annotations

from gateway.adapters.continuation import CachedResponse


class ResponseCache:
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
