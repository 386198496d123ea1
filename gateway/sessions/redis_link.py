"""One Redis connection pool, every call on it bounded in time and failing soft.

A shared store must never make a turn fail or hang: each call has a short deadline, a
failure marks the store down for a moment (the next requests do not each wait out a
timeout), is counted by reason, and is logged once per outage. Callers catch `StoreDown`
and carry on without the shared state (a full render, a local copy).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from gateway.sessions.observer import FALLBACK, StateObserver

log = logging.getLogger(__name__)
T = TypeVar("T")

TIMEOUT = 0.5  # seconds a call may take before the store counts as unreachable
RETRY_AFTER = 1.0  # seconds the store is left alone after it failed


class StoreDown(Exception):
    """The shared store could not answer; `reason`: unreachable | full."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RedisLink:
    def __init__(self, url: str, observer: StateObserver, *, timeout: float = TIMEOUT) -> None:
        self.url = url
        self.observer = observer
        self.timeout = timeout
        self.client = aioredis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                        retry=Retry(NoBackoff(), 1), health_check_interval=0)
        self._down_until = 0.0
        self.outage: str | None = None  # why the store cannot be used now (unreachable | full); None: it can

    def script(self, source: str) -> Any:
        return self.client.register_script(source)

    async def call(self, op: str, make: Callable[[], Awaitable[T]], *, n_sent: int = 0) -> T:
        """`make()`'s result, timed as `op`; StoreDown if the store failed or is resting."""
        if time.monotonic() < self._down_until:
            raise self._failed("unreachable", None)
        start = time.perf_counter()
        try:
            result = await asyncio.wait_for(make(), self.timeout)
        except (TimeoutError, RedisError, OSError) as exc:
            full = "OOM" in str(exc) or "maxmemory" in str(exc)
            if not full:
                self._down_until = time.monotonic() + RETRY_AFTER
            raise self._failed("full" if full else "unreachable", exc) from exc
        self.observer.round_trip(op, time.perf_counter() - start)
        if n_sent:
            self.observer.moved("write", n_sent)
        if self.outage is not None:
            log.warning("state store %s answers again", _safe(self.url))
            self.outage = None
        return result

    def _failed(self, reason: str, exc: BaseException | None) -> StoreDown:
        self.observer.fallback(reason)
        FALLBACK.set(reason)
        if self.outage != reason:
            self.outage = reason
            log.warning("state store %s %s (%s): turns go on without shared state (full renders, "
                        "flagged non_monotonic) until it answers again", _safe(self.url),
                        "is full" if reason == "full" else "is unreachable", exc or "resting after a failure")
        return StoreDown(reason)

    async def close(self) -> None:
        await self.client.aclose()


def _safe(url: str) -> str:
    """The URL without its password, for logs."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else url
