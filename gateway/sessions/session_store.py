"""A bounded, expiring map from a session key to its `TokenState`.

Bounded by total tokens held (4 bytes each) and by idle time; least recently used
sessions go first. Counters say what happened, so nothing is dropped silently.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

from gateway.tokenfix.state import TokenState


@dataclass
class StoreStats:
    hits: int = 0
    misses: int = 0
    evicted: int = 0
    expired: int = 0


class SessionStore:
    def __init__(self, max_tokens: int = 50_000_000, ttl: float = 3600.0) -> None:
        self.max_tokens = max_tokens
        self.ttl = ttl
        self.stats = StoreStats()
        self._entries: OrderedDict[str, tuple[float, TokenState]] = OrderedDict()
        self._tokens = 0

    def get(self, key: str) -> TokenState | None:
        entry = self._entries.get(key)
        if entry is None:
            self.stats.misses += 1
            return None
        stamp, state = entry
        if time.monotonic() - stamp > self.ttl:
            self._drop(key)
            self.stats.expired += 1
            self.stats.misses += 1
            return None
        self._entries.move_to_end(key)
        self.stats.hits += 1
        return state

    def peek(self, key: str) -> TokenState | None:
        """The state, if any (expired or not), without counting a hit or a miss or refreshing it."""
        entry = self._entries.get(key)
        return entry[1] if entry is not None else None

    def put(self, key: str, state: TokenState) -> None:
        if key in self._entries:
            self._drop(key)
        self._entries[key] = (time.monotonic(), state)
        self._tokens += len(state.tokens)
        while self._tokens > self.max_tokens and len(self._entries) > 1:
            self._drop(next(iter(self._entries)))
            self.stats.evicted += 1

    def discard(self, key: str) -> None:
        if key in self._entries:
            self._drop(key)

    def __len__(self) -> int:
        return len(self._entries)

    def _drop(self, key: str) -> None:
        _, state = self._entries.pop(key)
        self._tokens -= len(state.tokens)
