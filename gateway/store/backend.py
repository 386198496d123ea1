"""Where the state that makes turns exact lives: one interface, two backends.

`Store` is everything a later request may need — `prompt_cache_key` sessions, `store:
true` responses, RL rollouts — behind one small async interface, so the session pipeline
(gateway/pipeline/session.py, the one module that writes it: scripts/check_stores.py) never
knows which backend it holds:

- `MemoryStore` (the default): this process's bounded in-memory stores;
- `RedisStore` (gateway/store/redis/backend.py, `--state-url`): shared by every gateway
  process and pod, so any of them continues any session exactly, and a restart loses nothing.

Reads that fail (the shared store unreachable, restarted, full) answer "nothing found" and
say why in `FALLBACK` (gateway/store/observer.py), so a turn renders in full, flagged, instead of failing; only a
rollout, whose trajectory must not silently restart, answers an error.
"""

from __future__ import annotations

from typing import Any, Protocol

from gateway.store.conversations import ConversationStore, MemoryConversations
from gateway.store.observer import StoreObserver
from gateway.store.responses import CachedResponse, ResponseStore
from gateway.store.rollouts import Pending, RolloutStore
from gateway.store.sessions import Session, SessionStore
from gateway.tokenfix.record import TurnRecord
from gateway.tokenfix.state import TokenState

__all__ = ["MemoryStore", "Store", "open_conversations", "open_store"]


class Store(Protocol):
    kind: str  # "memory" | "redis"
    sessions: SessionStore  # this process's sessions (the whole store in memory, a cache over Redis)
    responses: ResponseStore
    rollouts: RolloutStore

    async def session(self, key: str, *, count: bool = True) -> Session | None:
        """The session under `key`; `count=False` looks without counting, refreshing or expiring."""

    async def put_session(self, key: str, session: Session, record: TurnRecord | None = None) -> None:
        """`session` is the latest under `key`; `record` is the turn that made it (what it continued)."""

    async def discard_session(self, key: str) -> None: ...

    async def response(self, response_id: str) -> CachedResponse | None: ...

    async def put_response(self, response: CachedResponse) -> None: ...

    async def delete_response(self, response_id: str) -> bool:
        """True when there was such a response."""

    async def begin_rollout(self, rollout_id: str, response_mask: list[int] | None) -> Pending:
        """A call on a rollout (new or live); 410 if it is gone."""

    async def commit_rollout(self, pending: Pending, record: TurnRecord, state: TokenState) -> None: ...

    async def export_rollout(self, rollout_id: str) -> dict[str, Any]:
        """The trajectory as GET /v1/rollouts/{id} answers it; 404 or 410."""

    async def delete_rollout(self, rollout_id: str) -> None: ...

    async def rollout_summary(self, prefix: str = "") -> dict[str, Any]:
        """The figures of the rollouts whose id starts with `prefix` (one tenant's), or of all."""
        ...

    async def figures(self) -> dict[str, int] | None:
        """The shared store's own figures for /metrics (memory, keys, evictions); None in process
        or while the store cannot answer."""

    async def close(self) -> None: ...


class MemoryStore:
    """The in-process backend: this process's stores, bounded as configured."""

    kind = "memory"

    def __init__(self, sessions: SessionStore | None = None, responses: ResponseStore | None = None,
                 rollouts: RolloutStore | None = None) -> None:
        self.sessions = SessionStore() if sessions is None else sessions
        self.responses = ResponseStore() if responses is None else responses
        self.rollouts = RolloutStore() if rollouts is None else rollouts

    async def session(self, key: str, *, count: bool = True) -> Session | None:
        return self.sessions.get(key) if count else self.sessions.peek(key)

    async def put_session(self, key: str, session: Session, record: TurnRecord | None = None) -> None:
        self.sessions.put(key, session)

    async def discard_session(self, key: str) -> None:
        self.sessions.discard(key)

    async def response(self, response_id: str) -> CachedResponse | None:
        return self.responses.get(response_id)

    async def put_response(self, response: CachedResponse) -> None:
        self.responses.put(response)

    async def delete_response(self, response_id: str) -> bool:
        return self.responses.delete(response_id)

    async def begin_rollout(self, rollout_id: str, response_mask: list[int] | None) -> Pending:
        return self.rollouts.begin(rollout_id, response_mask)

    async def commit_rollout(self, pending: Pending, record: TurnRecord, state: TokenState) -> None:
        self.rollouts.commit(pending, record, state)

    async def export_rollout(self, rollout_id: str) -> dict[str, Any]:
        return self.rollouts.get(rollout_id).export()

    async def delete_rollout(self, rollout_id: str) -> None:
        self.rollouts.delete(rollout_id)

    async def rollout_summary(self, prefix: str = "") -> dict[str, Any]:
        return {**self.rollouts.summary(prefix), "backend": self.kind}

    async def figures(self) -> dict[str, int] | None:
        return None

    async def close(self) -> None:
        pass


def open_store(url: str | None, sessions: SessionStore, responses: ResponseStore, rollouts: RolloutStore, *,
               observer: StoreObserver | None = None, key_prefix: str = "gw:") -> Store:
    """The backend `url` names (a Redis, a Redis Cluster, a Sentinel-managed master: see
    gateway/store/redis/url.py), or the in-process one for None; a ValueError saying what is
    wrong with a URL it cannot use. `key_prefix` namespaces every key (one Redis may serve
    several gateways or tenants)."""
    if not url:
        return MemoryStore(sessions, responses, rollouts)
    from gateway.store.redis.backend import RedisStore  # the redis client only where it is used
    from gateway.store.redis.keys import check_prefix
    from gateway.store.redis.url import parse

    parse(url)
    check_prefix(key_prefix)

    return RedisStore(url, sessions, responses, rollouts, observer=observer or StoreObserver(),
                      key_prefix=key_prefix)


def open_conversations(url: str | None, *, key_prefix: str = "gw:", observer: StoreObserver | None = None
                       ) -> ConversationStore:
    """The backend `url` names (as `--state-url`), or the in-process one for None."""
    if not url:
        return MemoryConversations()
    from gateway.store.redis.conversations import RedisConversations  # the redis client only where used

    return RedisConversations(url, key_prefix=key_prefix, observer=observer)
