"""The router: what each replica holds and how busy it is, and the choice made from that.

For every replica the router keeps a `SentIndex` of the prompts this process sent it, the
`ReplicaLoad` its /metrics report (gateway/upstream/replica_load.py) and, when the replica
publishes KV events (`--kv-events`), a `BlockIndex` a `KVEventSubscriber` keeps
(gateway/upstream/_kv_events.py). A replica's held prefix is then:

- events live: what its events reported, extended by what was sent to it and not reported
  yet (a prompt still queued or in prefill). A reported chunk leaves the sent index, so
  the events alone say when it is evicted; what stays there unreported ages out.
- no events: what was sent to it, bounded by its KV capacity in chunks (vLLM's
  `kv_cache_size_tokens`; 1M tokens until /metrics told), least recently used first. Kept as
  a `SentTree`, where a continuing session's turn costs its new chunks: its keys come from the
  session's last turn (`prompt_keys`), and the lookup bisects the chain.

Every gateway process (`--workers`, pods) subscribes to every replica, so the event-fed
picture is the same everywhere; without events each process knows only what it sent, and
a session's key still sends a prompt no one holds to the same replica from any process.

The choice itself is `routing.choose` (`--routing prefix`); `session` (rendezvous hashing
of the session key, bounded load), `least-loaded` and `round-robin` are there to compare
against. Each decision goes into `DECISIONS` (the request's access log line) and `stats`.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections import OrderedDict
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol, TypeVar
from urllib.parse import urlsplit

import httpx
import numpy as np

from gateway.upstream import replica_load, routing
from gateway.upstream._kv_events import KVEventSubscriber
from gateway.upstream.prefix_index import BLOCK_TOKENS, BlockIndex, KeyChain, SentIndex, SentTree, prompt_keys
from gateway.upstream.replica_load import ReplicaLoad

__all__ = ["DECISIONS", "MATCH_BUCKETS", "Decision", "ReplicaView", "Router"]

log = logging.getLogger(__name__)

MODES = ("prefix", "session", "least-loaded", "round-robin")
DEFAULT_CAPACITY_TOKENS = 1 << 20  # a replica's KV cache until its /metrics say
# Held prefixes this close count as equal, and a shorter one as none: it saves less prefill
# than a queue costs (two of vLLM's CPU blocks, sixteen of its GPU blocks).
TIE_TOKENS = 256
MAX_SESSIONS = 100_000  # session keys whose last replica is remembered (least recently used beyond)
MATCH_BUCKETS = (0, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


@dataclass(slots=True)
class Decision:
    replica: str
    reason: str  # routing.choose's, or the mode's name
    matched: int  # prompt tokens the chosen replica holds
    best: int  # the most any candidate held


# The decisions made for the current request (gateway/server/_observe.py sets a list per request).
DECISIONS: ContextVar[list[Decision] | None] = ContextVar("routing_decisions", default=None)


@dataclass
class RouterStats:
    decisions: dict[str, int] = field(default_factory=dict)  # by reason
    matched_tokens: int = 0  # prompt tokens the chosen replicas held, summed
    best_tokens: int = 0  # the longest held prefix per decision, summed
    below_best: int = 0  # decisions that went elsewhere than the longest prefix (load)
    matched_buckets: list[int] = field(default_factory=lambda: [0] * (len(MATCH_BUCKETS) + 1))

    def count(self, decision: Decision) -> None:
        self.decisions[decision.reason] = self.decisions.get(decision.reason, 0) + 1
        self.matched_tokens += decision.matched
        self.best_tokens += decision.best
        self.below_best += decision.matched < decision.best
        self.matched_buckets[bisect.bisect_left(MATCH_BUCKETS, decision.matched)] += 1


class Routed(routing.Routable, Protocol):
    state: str


R = TypeVar("R", bound=Routed)


@dataclass(eq=False)
class ReplicaView:
    """What the router knows of one replica."""

    url: str
    sent: SentIndex | SentTree  # a SentIndex when events are expected (they take reported chunks out of it)
    load: ReplicaLoad = field(default_factory=ReplicaLoad)
    blocks: BlockIndex | None = None
    events: KVEventSubscriber | None = None
    tasks: list[asyncio.Task] = field(default_factory=list)
    placed: int = 0  # new branches (prompts with a long part no replica held) sent here

    @property
    def live(self) -> bool:
        return self.events is not None and self.events.live

    def held(self, keys: Sequence[int]) -> int:
        """Chunks of `keys` the replica holds, from the first."""
        if not self.live:
            return self.sent.match(keys)
        assert self.blocks is not None
        n = 0
        for key in keys:
            if key not in self.blocks and key not in self.sent:
                break
            n += 1
        return n


class Router:
    def __init__(self, mode: str = "prefix", *, block_tokens: int = BLOCK_TOKENS,
                 load_factor: float = routing.LOAD_FACTOR, kv_events: Sequence[str] = (),
                 metrics_interval: float = 1.0) -> None:
        """`kv_events`: where replicas publish, each `[UPSTREAM=]ENDPOINT[,REPLAY_ENDPOINT]`
        (ENDPOINT may name `{host}`, the replica's host: one spec for every replica);
        `metrics_interval`: seconds between reads of a replica's /metrics (0: never)."""
        if mode not in MODES:
            raise ValueError(f"routing mode {mode!r} is not one of {', '.join(MODES)}")
        self.mode = mode
        self.block_tokens = block_tokens
        self.load_factor = load_factor
        self.metrics_interval = metrics_interval
        self.endpoints = [_endpoint_spec(spec) for spec in kv_events]
        self.views: dict[str, ReplicaView] = {}
        self.stats = RouterStats()
        self.last: Decision | None = None  # the latest choice (read right after `pick`, before any await)
        self._turn = 0
        self._client: httpx.AsyncClient | None = None
        self._sessions: OrderedDict[str, str] = OrderedDict()  # session key → the replica it went to last

    def start(self, client: httpx.AsyncClient) -> None:
        """Follow every replica tracked, and those that join later, reading /metrics with `client`."""
        self._client = client
        for view in self.views.values():
            self._follow(view)

    def track(self, url: str) -> None:
        """A replica joined: follow its /metrics and KV events (from `start()` on)."""
        if url in self.views:
            return
        capacity = DEFAULT_CAPACITY_TOKENS // self.block_tokens
        if (endpoints := self._endpoints(url)) is None:
            self.views[url] = view = ReplicaView(url, SentTree(capacity))
        else:
            sent = SentIndex(capacity)
            view = self.views[url] = ReplicaView(url, sent, blocks=BlockIndex(self.block_tokens))
            view.events = KVEventSubscriber(view.blocks, *endpoints, on_stored=sent.discard)
        if self._client is not None:
            self._follow(view)

    def _follow(self, view: ReplicaView) -> None:
        if view.tasks:
            return
        if self.metrics_interval > 0 and self._client is not None:
            view.tasks.append(asyncio.create_task(replica_load.watch(
                view.url, self._client, self.metrics_interval, lambda load: self.update_load(view.url, load))))
        if view.events is not None:
            view.tasks.append(asyncio.create_task(self._subscribe(view)))

    def forget(self, url: str) -> None:
        """The replica left the pool."""
        view = self.views.pop(url, None)
        for task in view.tasks if view is not None else ():
            task.cancel()

    async def close(self) -> None:
        tasks = [task for view in self.views.values() for task in view.tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.views.clear()

    def prompt_keys(self, prompt_ids: Sequence[int] | np.ndarray, *, cache_salt: str | None = None,
                    after: tuple[Sequence[int], KeyChain] | None = None) -> KeyChain | None:
        """The prompt's chunk keys, when routing by prefix (else None): `after`, earlier exact
        tokens and their keys (a session's last turn), saves hashing the chunks it shares."""
        if self.mode != "prefix":
            return None
        return prompt_keys(prompt_ids, self.block_tokens, cache_salt=cache_salt, after=after)

    def pick(self, candidates: Sequence[R], affinity: str | None = None, *,
             prompt_ids: Sequence[int] | np.ndarray | None = None, cache_salt: str | None = None,
             keys: KeyChain | None = None) -> R:
        """The replica for a prompt (`candidates`: the routable replicas, not empty); `keys`:
        the prompt's, made by `prompt_keys` (else made here from `prompt_ids`)."""
        if self.mode == "session":
            return self._decided(routing.pick(candidates, affinity, load_factor=self.load_factor), "session")
        if self.mode == "round-robin":
            self._turn += 1
            return self._decided(candidates[self._turn % len(candidates)], "round-robin")
        loads = [self._load(r) for r in candidates]
        if self.mode == "least-loaded":
            chosen = min(range(len(candidates)), key=lambda i: (loads[i], candidates[i].requests))
            return self._decided(candidates[chosen], "least-loaded")
        if keys is None and prompt_ids is not None:
            keys = self.prompt_keys(prompt_ids, cache_salt=cache_salt)
        return self._by_prefix(candidates, affinity, loads, keys.keys if keys is not None else [])

    def _by_prefix(self, candidates: Sequence[R], affinity: str | None, loads: list[int], keys: Sequence[int]) -> R:
        """`routing.choose` over what each candidate holds of the prompt; the prompt is then sent to the chosen."""
        views = [self.views.get(r.url) for r in candidates]
        held = [view.held(keys) if view is not None else 0 for view in views]
        kv = [view.load.kv_usage if view is not None else 0.0 for view in views]
        tie = TIE_TOKENS // self.block_tokens
        last = self._sessions.get(affinity) if affinity is not None else None
        sticky = next((i for i, r in enumerate(candidates) if r.url == last), None)
        # A new branch: more than `tie` of it is held nowhere (a new group's prompt, a new session), unless
        # it continues its session where its history is (a turn that adds a long tool output is no new branch).
        continuing = sticky is not None and held[sticky] > tie and held[sticky] >= max(held) - tie
        placing = len(keys) - max(held) > tie and not continuing
        replica, reason = routing.choose(candidates, held, loads, affinity, kv_usage=kv, tie=tie,
                                         sticky=candidates[sticky] if sticky is not None else None,
                                         placing=placing, placed=[view.placed if view else 0 for view in views],
                                         load_factor=self.load_factor)
        if affinity is not None:
            self._sessions[affinity] = replica.url
            self._sessions.move_to_end(affinity)
            if len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        view = self.views.get(replica.url)
        if view is not None and placing:
            view.placed += 1
        if view is not None and keys:  # with events live, only what they have not reported yet
            blocks = view.blocks if view.live else None
            view.sent.add(keys if blocks is None else [k for k in keys if k not in blocks])
        matched = held[candidates.index(replica)] * self.block_tokens
        return self._decided(replica, reason, matched, max(held) * self.block_tokens)

    def _decided(self, replica: R, reason: str, matched: int = 0, best: int = 0) -> R:
        decision = self.last = Decision(replica.url, reason, matched, best)
        self.stats.count(decision)
        if (decisions := DECISIONS.get()) is not None:
            decisions.append(decision)
        return replica

    def _load(self, replica: Routed) -> int:
        """In flight from this process, plus what waits in the replica's queue (from every
        process). Not vLLM's running count: read up to a second ago, it still holds requests
        this process saw finish, and an idle replica would look busy to the next turn."""
        view = self.views.get(replica.url)
        return replica.inflight + (view.load.waiting if view is not None else 0)

    def cleared(self, url: str) -> None:
        """The replica's prefix cache is empty (reset, restarted, or its weights changed)."""
        if (view := self.views.get(url)) is None:
            return
        view.sent.clear()
        if view.blocks is not None:
            view.blocks.clear()

    def update_load(self, url: str, load: ReplicaLoad) -> None:
        """A replica's /metrics reading: its queue, KV usage and capacity; a new start time
        means it restarted, and what it held is forgotten."""
        if (view := self.views.get(url)) is None:
            return
        before = view.load
        if before.started_at is not None and load.started_at is not None and load.started_at != before.started_at:
            log.info("replica %s restarted: forgetting what its cache held", view.url)
            self.cleared(url)
        if load.capacity_tokens and load.capacity_tokens != before.capacity_tokens:
            view.sent.resize(max(load.capacity_tokens // self.block_tokens, 1))
        view.load = load

    async def _subscribe(self, view: ReplicaView) -> None:
        assert view.events is not None
        try:
            await view.events.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # a bad endpoint must not take routing down: the sent index still works
            log.exception("kv events of %s stopped", view.url)
            view.events.live = False

    def _endpoints(self, url: str) -> tuple[str, str | None] | None:
        host = urlsplit(url).hostname or ""
        named = [spec for spec in self.endpoints if spec[0] is not None and spec[0].rstrip("/") == url.rstrip("/")]
        for _, endpoint, replay in named or [spec for spec in self.endpoints if spec[0] is None]:
            return endpoint.replace("{host}", host), replay.replace("{host}", host) if replay else None
        return None


def _endpoint_spec(spec: str) -> tuple[str | None, str, str | None]:
    """`[UPSTREAM=]ENDPOINT[,REPLAY]` → (upstream or None for every replica, endpoint, replay)."""
    upstream, sep, rest = spec.partition("=")
    if not sep:
        upstream, rest = None, spec
    endpoint, _, replay = rest.partition(",")
    if not endpoint.startswith(("tcp://", "ipc://", "inproc://")):
        raise ValueError(f"--kv-events {spec!r}: the endpoint must be a ZMQ address such as tcp://{{host}}:5557")
    return upstream, endpoint, replay or None
