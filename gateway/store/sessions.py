"""Sessions: the exact tokens of a `prompt_cache_key`'s latest turn, bounded and expiring.

A session is what the next request under the same key continues: the turn's `TokenState`,
and, for a client that resends its whole history over HTTP (Codex), where that request's
items ended in its body (`ResentPrefix`, gateway/adapters/responses/resent.py), so the next body's
covered part is recognised from its bytes. Bounded by total tokens held (4 bytes each) and
by idle time; least recently used sessions go first. Counters say what happened, so
nothing is dropped silently.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

from gateway.tokenfix.state import TokenState

__all__ = ["ResentPrefix", "Session", "SessionStore"]


@dataclass(frozen=True, slots=True)
class ResentPrefix:
    """Where a request's `input` items are in its body, for recognising them in the next one."""

    start: int  # offset of the `input` array's '['
    end: int  # offset just past its last item: body[:end] is what a resend repeats
    digest: bytes  # XXH3-128 of body[:end]
    items: int  # the conversation items those input items became (instructions taken out)
    instructions_end: int  # the end of the leading input item taken as the instructions; 0: none
    instructions_field: bool  # the body set `instructions` (then no leading item is taken)


@dataclass(slots=True)
class Session:
    state: TokenState  # the latest turn's exact tokens
    resent: ResentPrefix | None = None  # where its request's items ended in the body (HTTP)
    # With a shared store: which version of it this is (its token log's id, the header's version),
    # so a process holding it locally reads only the header to know it is current.
    tag: tuple[str, int] | None = None


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
        self._entries: OrderedDict[str, tuple[float, Session]] = OrderedDict()
        self._tokens = 0

    def get(self, key: str) -> Session | None:
        entry = self._entries.get(key)
        if entry is None:
            self.stats.misses += 1
            return None
        stamp, session = entry
        if time.monotonic() - stamp > self.ttl:
            self._drop(key)
            self.stats.expired += 1
            self.stats.misses += 1
            return None
        self._entries.move_to_end(key)
        self.stats.hits += 1
        return session

    def peek(self, key: str) -> Session | None:
        """The session, if any (expired or not), without counting a hit or a miss or refreshing it."""
        entry = self._entries.get(key)
        return entry[1] if entry is not None else None

    def put(self, key: str, session: Session) -> None:
        if key in self._entries:
            self._drop(key)
        self._entries[key] = (time.monotonic(), session)
        self._tokens += len(session.state.tokens)
        while self._tokens > self.max_tokens and len(self._entries) > 1:
            self._drop(next(iter(self._entries)))
            self.stats.evicted += 1

    def discard(self, key: str) -> None:
        if key in self._entries:
            self._drop(key)

    def __len__(self) -> int:
        return len(self._entries)

    def _drop(self, key: str) -> None:
        _, session = self._entries.pop(key)
        self._tokens -= len(session.state.tokens)
