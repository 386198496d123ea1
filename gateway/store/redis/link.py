"""One Redis client (a single Redis, a Cluster or a Sentinel-managed master), every call on it
bounded in time and failing soft.

A shared store must never make a turn fail or hang: each call has a short deadline, a
failure marks the node that failed down for a moment (the next requests for its keys do not
each wait out a timeout, while keys on a cluster's other masters go on), is counted by node
and reason, and is logged once per outage. Callers catch `StoreDown` and carry on without
the shared state (a full render, a local copy). redis-py follows a cluster's MOVED/ASK
redirections itself; a call that failed on a connection error is retried once (on a single
Redis or Sentinel by redis-py, reconnecting to the master the sentinels name now; on a
cluster here, after reading the slot map again, which names a failover's promoted replica).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import ClusterDownError, ConnectionError, RedisError, TryAgainError

from gateway.store.observer import FALLBACK, StoreObserver
from gateway.store.redis.url import connect, parse

__all__ = ["RedisLink", "StoreDown"]

log = logging.getLogger(__name__)
T = TypeVar("T")

TIMEOUT = 0.5  # seconds a call may take before the store counts as unreachable, unless the URL's socket_timeout says
RETRY_AFTER = 1.0  # seconds a node is left alone after it failed
INITIALIZE_TIMEOUT = 2.0  # seconds a cluster client may take to read the slot map and meet the masters


class StoreDown(Exception):
    """The shared store could not answer; `reason`: unreachable | full."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RedisLink:
    def __init__(self, url: str, observer: StoreObserver) -> None:
        self.address = parse(url)
        self.url = self.address.label
        self.observer = observer
        # One deadline for redis-py's socket and for the whole call: the URL's socket_timeout, else TIMEOUT.
        self.timeout = float(self.address.options.get("socket_timeout", TIMEOUT))
        self.client = connect(self.address, timeout=self.timeout)
        self.cluster = self.address.topology == "cluster"
        self._met = False  # a cluster's slot map was read
        self._down_until: dict[str, float] = {}  # node -> monotonic time it is left alone until
        self.outage: str | None = None  # why the store cannot be used now (unreachable | full); None: it can

    def script(self, source: str) -> Any:
        return self.client.register_script(source)

    def node(self, key: str | None = None) -> str:
        """The node that holds `key` (a cluster's master for its slot; the master the sentinels
        named last), for metrics and outages."""
        if self.cluster and key is not None:
            try:
                return self.client.nodes_manager.get_node_from_slot(self.client.keyslot(key)).name
            except (RedisError, LookupError, AttributeError):  # the slot map is not read yet
                return "cluster"
        if self.address.topology == "sentinel":
            master = getattr(self.client.connection_pool, "master_address", None)  # None before the first call
            return f"{master[0]}:{master[1]}" if master else self.url
        return self.url

    async def call(self, op: str, make: Callable[[], Awaitable[T]], *, n_sent: int = 0, key: str | None = None) -> T:
        """`make()`'s result, timed as `op`; StoreDown if the node holding `key` failed or is resting."""
        node = self.node(key)
        if time.monotonic() < self._down_until.get(node, 0.0):
            raise self._failed("unreachable", node, None)
        start = time.perf_counter()
        try:
            if self.cluster and not self._met:  # the slot map and the masters, met once (a few round trips)
                await asyncio.wait_for(self.client.initialize(), INITIALIZE_TIMEOUT)
                self._met = True
            try:
                result = await asyncio.wait_for(make(), self.timeout)
            except (ConnectionError, ClusterDownError, TryAgainError):
                if not self.cluster:
                    raise  # redis-py retried the connection once already (a Sentinel's: at the master it names now)
                # A master gone (or a slot moving): the slot map read again (a failover's promoted replica
                # holds the slot now), with its own deadline, and the call once more.
                await asyncio.wait_for(self.client.initialize(), INITIALIZE_TIMEOUT)
                result = await asyncio.wait_for(make(), self.timeout)
        except (TimeoutError, RedisError, OSError) as exc:
            full = "OOM" in str(exc) or "maxmemory" in str(exc)
            if not full and not (self.cluster and key is None):  # a keyless cluster call: no one node to blame
                self._down_until[node] = time.monotonic() + RETRY_AFTER
            raise self._failed("full" if full else "unreachable", node, exc) from exc
        self.observer.round_trip(op, time.perf_counter() - start)
        if n_sent:
            self.observer.moved("write", n_sent)
        if self.outage is not None:
            log.warning("state store %s answers again", self.url)
            self.outage = None
        return result

    def _failed(self, reason: str, node: str, exc: BaseException | None) -> StoreDown:
        self.observer.fallback(reason)
        self.observer.node_failed(node, reason)
        FALLBACK.set(reason)
        if self.outage != reason:
            self.outage = reason
            log.warning("state store %s %s (node %s: %s): turns go on without shared state (full renders, "
                        "flagged non_monotonic) until it answers again", self.url,
                        "is full" if reason == "full" else "is unreachable", node,
                        exc or "resting after a failure")
        return StoreDown(reason)

    async def figures(self) -> dict[str, dict[str, Any]]:
        """Each master's INFO, by node (one round trip to each)."""
        if self.cluster:
            replies = await self.client.info(target_nodes=self.client.PRIMARIES)
            return replies if isinstance(replies, dict) and all(isinstance(v, dict) for v in replies.values()) \
                else {self.url: replies}
        info = await self.client.info()
        return {self.node(): info}

    async def close(self) -> None:
        await self.client.aclose()
