"""The replica pool: which replicas exist, which are routable, and which gets a request.

Membership comes from `discovery` (re-resolved every `resolve_interval` when an upstream
is a DNS name), health from one `health.watch` task per replica, the choice from the
`Router` (gateway/upstream/router.py), which follows every member's cache and load.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import httpx

from gateway.core.errors import UpstreamUnavailable
from gateway.upstream import health, routing
from gateway.upstream._barrier import Barrier
from gateway.upstream._discovery import Resolver
from gateway.upstream._transport import Transport
from gateway.upstream.disaggregation import SplitPolicy, SplitStats
from gateway.upstream.health import HealthPolicy
from gateway.upstream.outlier import OutlierDetector, OutlierPolicy
from gateway.upstream.prefix_index import KeyChain
from gateway.upstream.replica import Replica
from gateway.upstream.router import Router

__all__ = ["Pool"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Pool:
    def __init__(self, upstreams: Sequence[str], *, api: str = "auto", policy: HealthPolicy | None = None,
                 resolve_interval: float = 10.0, load_factor: float = routing.LOAD_FACTOR,
                 idle_timeout: float | None = 300.0, header_timeout: float | None = 30.0,
                 outliers: OutlierPolicy | None = None, router: Router | None = None,
                 split: SplitPolicy | None = None, barrier_timeout: float = 120.0) -> None:
        """`idle_timeout`: seconds a generation may go without a byte from its replica;
        `header_timeout`: seconds a replica may take to accept one (its response headers);
        `split`: when a turn runs in a prefill and a decode leg (gateway/upstream/disaggregation.py);
        `barrier_timeout`: seconds a new generation may wait while the fleet is paused for an update."""
        transport = Transport(limits=httpx.Limits(max_connections=None, max_keepalive_connections=512))
        timeout = httpx.Timeout(connect=5.0, read=idle_timeout, write=idle_timeout, pool=None)
        self.client = httpx.AsyncClient(timeout=timeout, transport=transport)
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.resolver = Resolver(upstreams)
        self.api = api
        self.policy = policy or HealthPolicy()
        self.resolve_interval = resolve_interval
        self.load_factor = load_factor
        self.router = router or Router(load_factor=load_factor)
        self.replicas: list[Replica] = []
        self.outliers = OutlierDetector(outliers)
        self.split_policy = split or SplitPolicy()
        self.split_stats = SplitStats()
        self.barrier = Barrier(barrier_timeout)  # closed by the control plane (gateway/upstream/control.py)
        # The fleet's weight version once a trainer set one: a replica that joins later is out of
        # routing (`fenced`) until an update brings it there.
        self.weight_version: str | None = None
        self.retiring: set[str] = set()  # LoRA adapters being unloaded: no new generation may name them
        self.adapter_users: Counter[str] = Counter()  # generations naming each LoRA adapter, not ended
        self._watchers: dict[Replica, asyncio.Task] = {}
        self._resolving: asyncio.Task | None = None

    async def start(self) -> None:
        """Resolve and try to admit every replica once (so a healthy pool serves at once),
        then keep watching."""
        added = self.sync(await self.resolver.resolve(), watch=False)
        self.router.start(self.client)
        await asyncio.gather(*(health.admit(r, self.api, self.policy) for r in added))
        for replica in added:
            self._watch(replica)
        if self.resolver.dynamic and self.resolve_interval > 0:
            self._resolving = asyncio.create_task(self._resolve_loop())

    async def close(self) -> None:
        tasks = [*self._watchers.values(), *([self._resolving] if self._resolving else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.router.close()
        for replica in self.replicas:
            replica.connections.close()
        await self.client.aclose()

    @property
    def healthy(self) -> list[Replica]:
        """The routable replicas."""
        return [r for r in self.replicas if r.routable]

    @property
    def ready(self) -> bool:
        return any(r.routable for r in self.replicas)

    @property
    def disaggregated(self) -> bool:
        """Whether some replica is declared for one leg only (prefill/decode disaggregation)."""
        return any(r.role != "both" for r in self.replicas)

    @property
    def adapters(self) -> dict[str, str | None]:
        """The LoRA adapters a generation may name: held by a routable replica, not being unloaded."""
        return {name: root for r in self.replicas if r.routable for name, root in r.adapters.items()
                if name not in self.retiring}

    @property
    def max_model_len(self) -> int | None:
        lengths = [r.max_model_len for r in self.replicas if r.max_model_len]
        return min(lengths) if lengths else None

    def prompt_keys(self, prompt_ids: Sequence[int], *, cache_salt: str | None = None,
                    after: tuple[Sequence[int], KeyChain] | None = None) -> KeyChain | None:
        """The prompt's chunk keys when the router needs them (`Router.prompt_keys`)."""
        return self.router.prompt_keys(prompt_ids, cache_salt=cache_salt, after=after)

    def pick(self, affinity: str | None = None, exclude: Sequence[Replica] = (), *,
             prompt_ids: Sequence[int] | None = None, cache_salt: str | None = None,
             keys: KeyChain | None = None, leg: str = "decode", adapter: str | None = None) -> Replica:
        """The replica for a prompt: the one holding most of it within the load bound, else the
        session's (`affinity`), else the least busy (gateway/upstream/routing.py); when none is
        routable, among the ejected ones (panic routing) rather than none. `leg`: a generation
        ("decode") goes to no prefill-only replica, a "prefill" leg to no decode-only one. A replica
        `fenced` off by the control plane (not at the fleet's weight version) is never chosen."""
        members = [r for r in self.replicas if r.serves(leg) and r not in exclude and r.fenced is None
                   and (adapter is None or adapter in r.adapters)]  # `adapter`: a LoRA only its holders serve
        candidates = [r for r in members if r.healthy] or self.outliers.panic(members)
        if not candidates:
            raise UpstreamUnavailable("no healthy vLLM replica is available")
        return self.router.pick(candidates, affinity, prompt_ids=prompt_ids, cache_salt=cache_salt, keys=keys)

    async def open(self, send: Callable[[Replica], Awaitable[T]], request_id: str, affinity: str | None = None, *,
                   prompt_ids: Sequence[int] | None = None, cache_salt: str | None = None,
                   keys: KeyChain | None = None, adapter: str | None = None) -> T:
        """`send` to the replica `pick` chooses, then to the next while one refuses before answering
        (UpstreamUnavailable): nothing was generated yet, so trying another is safe. While the fleet
        is paused for an update, it first waits for the resume (gateway/upstream/_barrier.py)."""
        await self.barrier.passed()
        if adapter is not None:  # vLLM's block hashes hold the LoRA's name: so do the router's keys
            cache_salt, keys = f"{cache_salt or ''}\x00lora:{adapter}", None
        tried: list[Replica] = []
        last_error: UpstreamUnavailable | None = None
        for _ in range(len(self.replicas)):
            try:
                replica = self.pick(affinity, exclude=tried, prompt_ids=prompt_ids, cache_salt=cache_salt, keys=keys,
                                    adapter=adapter)
            except UpstreamUnavailable as exc:
                raise last_error or exc
            try:
                return await send(replica)
            except UpstreamUnavailable as exc:
                log.warning("request %s: %s; trying another replica", request_id, exc.message)
                tried.append(replica)
                last_error = exc
        raise last_error or UpstreamUnavailable("no healthy vLLM replica is available")

    def interrupt(self) -> int:
        """Fail every open upstream stream (shutdown deadline); returns how many."""
        return sum(replica.interrupt() for replica in self.replicas)

    def sync(self, urls: Sequence[str], *, watch: bool = True) -> list[Replica]:
        """Make the membership `urls`: new replicas start unroutable (admitted by their
        watcher after warmup); vanished ones drain, and leave once idle. Returns the new ones."""
        known = {r.url: r for r in self.replicas}
        added = [Replica(url=url, client=self.client, header_timeout=self.header_timeout,
                         idle_timeout=self.idle_timeout, detector=self.outliers,
                         role=self.resolver.roles.get(url, "both")) for url in urls if url not in known]
        for replica in self.replicas:
            if replica.url not in urls and replica.state != "draining":
                log.info("replica %s left the upstream set; draining it", replica.url)
                replica.state = "draining"
                self._unwatch(replica)
            elif replica.url in urls and replica.state == "draining":
                log.info("replica %s is back", replica.url)
                replica.state = "starting"
                self._watch(replica)
        gone = [r for r in self.replicas if r.state == "draining" and not r.inflight]
        for replica in gone:
            replica.connections.close()
            self.router.forget(replica.url)
        self.replicas = [r for r in self.replicas if r not in gone] + added
        self.outliers.members = self.replicas
        if watch:
            for replica in added:
                self._watch(replica)
        for replica in added:
            log.info("replica %s joined", replica.url)
            if self.weight_version is not None:
                replica.fenced = f"it joined after the fleet moved to weight version {self.weight_version!r}"
            self.router.track(replica.url)
        return added

    def _watch(self, replica: Replica) -> None:
        self._watchers[replica] = asyncio.create_task(health.watch(replica, self.api, self.policy))

    def _unwatch(self, replica: Replica) -> None:
        if (task := self._watchers.pop(replica, None)) is not None:
            task.cancel()

    async def _resolve_loop(self) -> None:
        while True:
            await asyncio.sleep(self.resolve_interval)
            self.sync(await self.resolver.resolve())
