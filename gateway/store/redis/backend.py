"""The shared backend: sessions, stored responses and rollouts in Redis (`--state-url`).

Any gateway process or pod continues any session exactly, and a restart loses nothing.

A session is a small header (`{prefix}s:{{key}}`: the id of its token log, a version, the
token count and the `TokenState`'s metadata as JSON) and an append-only int32 log
(`{prefix}s:{{key}}:{log}`), under one Redis Cluster hash tag, so in one slot
(gateway/store/redis/keys.py). A turn that continues the session's tokens appends only
what it added (its prompt delta and generation) and moves the header on, in one script call
that first checks the header is still the version the turn continued; one that does not
(a rewritten history, or another process's turn committed in between) writes a new log.
This process keeps its sessions in memory (the in-process store, with its bounds) tagged
with the version they are: a read sends that tag and gets back only the header when it is
current (the common case: the same process served the previous turn), only the missing
suffix when the log grew, the whole log otherwise — always one round trip.

A stored response is one hash (JSON metadata, int32 tokens) with a TTL; rollouts are in
gateway/store/redis/_rollouts.py. Every failure is soft (gateway/store/linkpy),
and every call is a single command or one script on one slot, so the same code runs on a
single Redis, a Sentinel-managed one and a Redis Cluster.
"""

from __future__ import annotations

import os
from array import array
from typing import Any

from gateway.store.observer import FALLBACK, StoreObserver
from gateway.store.redis import _codec as codec
from gateway.store.redis._rollouts import RedisRollouts
from gateway.store.redis.keys import tag
from gateway.store.redis.link import RedisLink, StoreDown
from gateway.store.responses import CachedResponse, ResponseStore
from gateway.store.rollouts import Pending, RolloutStore
from gateway.store.sessions import ResentPrefix, Session, SessionStore
from gateway.tokenfix.record import TurnRecord
from gateway.tokenfix.state import TokenState

__all__ = ["RedisStore"]

RESPONSE_TTL = 30 * 24 * 3600.0  # seconds a stored response lives (as OpenAI keeps them)

# ARGV: the local copy's log id, version and token count. Returns {} (no session), the header
# alone (the local copy is current), or the header, metadata, tokens from `from` bytes on, `from`.
_READ = """
local h = redis.call('HMGET', KEYS[1], 'log', 'v', 'n', 'meta')
if not h[1] then return {} end
if h[1] == ARGV[1] and h[2] == ARGV[2] then return {h[1], h[2], h[3]} end
local from = 0
if h[1] == ARGV[1] then from = tonumber(ARGV[3]) * 4 end
local tail = redis.call('GETRANGE', KEYS[1] .. ':' .. h[1], from, tonumber(h[3]) * 4 - 1)
return {h[1], h[2], h[3], h[4], tail, from}
"""

# ARGV: mode (append | new), the continued log id and version, a new log id, tokens, the new
# token count, metadata, TTL in ms. Returns {version, log}, or {0, ''} when an append finds the
# session moved on (or its log gone): the caller writes a new log instead.
_WRITE = """
local h = redis.call('HMGET', KEYS[1], 'log', 'v')
local v = tonumber(h[2] or '0')
local log = ARGV[4]
if ARGV[1] == 'append' then
  if h[1] ~= ARGV[2] or h[2] ~= ARGV[3] then return {0, ''} end
  log = h[1]
  local key = KEYS[1] .. ':' .. log
  if redis.call('STRLEN', key) ~= tonumber(ARGV[6]) * 4 - string.len(ARGV[5]) then return {0, ''} end
  redis.call('APPEND', key, ARGV[5])
  redis.call('PEXPIRE', key, ARGV[8])
else
  if h[1] then redis.call('UNLINK', KEYS[1] .. ':' .. h[1]) end
  redis.call('SET', KEYS[1] .. ':' .. log, ARGV[5], 'PX', ARGV[8])
end
redis.call('HSET', KEYS[1], 'log', log, 'v', v + 1, 'n', ARGV[6], 'meta', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[8])
return {v + 1, log}
"""

# ARGV: metadata, tokens, TTL in ms.
_PUT_RESPONSE = """
redis.call('HSET', KEYS[1], 'meta', ARGV[1], 't', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""


class RedisStore:
    kind = "redis"

    def __init__(self, url: str, sessions: SessionStore, responses: ResponseStore, rollouts: RolloutStore, *,
                 observer: StoreObserver, key_prefix: str = "gw:", response_ttl: float = RESPONSE_TTL) -> None:
        self.sessions, self.responses, self.rollouts = sessions, responses, rollouts
        self.observer = observer
        self.prefix = key_prefix
        self.link = RedisLink(url, observer)
        self.response_ttl = response_ttl
        self._read = self.link.script(_READ)
        self._write = self.link.script(_WRITE)
        self._put_response = self.link.script(_PUT_RESPONSE)
        self._rollouts = RedisRollouts(self.link, rollouts, key_prefix)

    # -- sessions ------------------------------------------------------------------------

    async def session(self, key: str, *, count: bool = True) -> Session | None:
        held = self.sessions.peek(key)
        tag = held.tag if held is not None else None
        n_held = len(held.state.tokens) if held is not None else 0
        args = [tag[0], tag[1], n_held] if tag is not None else ["", "", 0]
        try:
            name = self._session_key(key)
            reply = await self.link.call("session_read", lambda: self._read(keys=[name], args=args), key=name)
        except StoreDown:
            return self._miss(count)
        if not reply:
            if held is not None and held.tag is None:  # only here (the store could not take it): still exact
                self.observer.session_read("local")
                return self.sessions.get(key) if count else held
            if held is not None:  # it was in the store: restarted empty, flushed or evicted
                self.sessions.discard(key)
                self.observer.fallback("lost")
                FALLBACK.set("lost")
            self.observer.session_read("miss")
            return self._miss(count)
        log_id, version = reply[0].decode(), int(reply[1])
        if len(reply) == 3:  # the local copy is current
            assert held is not None
            self.observer.session_read("local")
            return self.sessions.get(key) if count else held
        n_tokens, meta, tail, start = int(reply[2]), codec.loads(reply[3]), reply[4], int(reply[5])
        self.observer.moved("read", len(tail) + len(reply[3]))
        if start:
            assert held is not None
            tokens = array("i", held.state.tokens)
            tokens.extend(codec.ids_from_bytes(tail))
        else:
            tokens = codec.ids_from_bytes(tail)
        if len(tokens) != n_tokens:  # the log was evicted apart from its header
            self.observer.fallback("lost")
            FALLBACK.set("lost")
            return self._miss(count)
        self.observer.session_read("suffix" if start else "full")
        resent = ResentPrefix(**meta["resent"]) if meta.get("resent") else None
        found = Session(codec.state_from(meta["state"], tokens), resent, (log_id, version))
        self.sessions.put(key, found)
        if count:
            self.sessions.stats.hits += 1
        return found

    def _miss(self, count: bool) -> None:
        if count:
            self.sessions.stats.misses += 1

    async def put_session(self, key: str, session: Session, record: TurnRecord | None = None) -> None:
        held = self.sessions.peek(key)
        state = session.state
        meta = codec.dumps({"state": codec.state_meta(state), "resent": _resent(session.resent)})
        ttl = str(int(self.sessions.ttl * 1000))
        try:
            reply = None
            if held is not None and held.tag is not None and _extends(state, held.state, record):
                suffix = codec.ids_to_bytes(state.tokens[len(held.state.tokens):])
                reply = await self._write_session(key, ["append", held.tag[0], held.tag[1], "", suffix,
                                                        len(state.tokens), meta, ttl], len(suffix) + len(meta))
                if not reply[0]:
                    self.observer.fallback("conflict")  # another process's turn came first: a new log
                    reply = None
            if reply is None:
                data = codec.ids_to_bytes(state.tokens)
                reply = await self._write_session(key, ["new", "", "", os.urandom(6).hex(), data, len(state.tokens),
                                                        meta, ttl], len(data) + len(meta))
            tag = (reply[1].decode(), int(reply[0]))
        except StoreDown:
            tag = None  # kept here only: the next read finds what the store has
        self.sessions.put(key, Session(state, session.resent, tag))

    async def _write_session(self, key: str, args: list[Any], n_bytes: int) -> Any:
        name = self._session_key(key)
        return await self.link.call("session_write", lambda: self._write(keys=[name], args=args), n_sent=n_bytes,
                                    key=name)

    async def discard_session(self, key: str) -> None:
        self.sessions.discard(key)
        try:
            header = self._session_key(key)
            log_id = await self.link.call("session_discard", lambda: self.link.client.hget(header, "log"), key=header)
            names = [header, f"{header}:{log_id.decode()}"] if log_id else [header]
            await self.link.call("session_discard", lambda: self.link.client.unlink(*names), key=header)
        except StoreDown:
            pass

    def _session_key(self, key: str) -> str:
        return f"{self.prefix}s:{tag(key)}"

    # -- stored responses ----------------------------------------------------------------

    async def response(self, response_id: str) -> CachedResponse | None:
        name = f"{self.prefix}r:{response_id}"
        held = self.responses.get(response_id)
        try:
            if held is not None:  # immutable once stored: only whether it still exists (DELETE elsewhere)
                if await self.link.call("response_exists", lambda: self.link.client.exists(name), key=name):
                    return held
                self.responses.delete(response_id)
                return None
            meta, tokens = await self.link.call("response_read", lambda: self.link.client.hmget(name, "meta", "t"),
                                                key=name)
        except StoreDown:
            return held
        if meta is None:
            return None
        self.observer.moved("read", len(meta) + len(tokens or b""))
        fields = codec.loads(meta)
        state = codec.state_from(fields["state"], codec.ids_from_bytes(tokens)) if fields["state"] else None
        found = CachedResponse(fields["response_id"], fields["conversation"], state,
                               response=fields.get("response"), inputs=fields.get("inputs"))
        self.responses.put(found)
        return found

    async def put_response(self, response: CachedResponse) -> None:
        self.responses.put(response)
        state = response.tokens
        meta = codec.dumps({"response_id": response.response_id, "conversation": response.conversation,
                            "state": codec.state_meta(state) if state is not None else None,
                            "response": response.response, "inputs": response.inputs})
        tokens = codec.ids_to_bytes(state.tokens) if state is not None else b""
        name = f"{self.prefix}r:{response.response_id}"
        args = [meta, tokens, int(self.response_ttl * 1000)]
        try:
            await self.link.call("response_write", lambda: self._put_response(keys=[name], args=args),
                                 n_sent=len(meta) + len(tokens), key=name)
        except StoreDown:
            pass  # kept in this process only

    async def delete_response(self, response_id: str) -> bool:
        held = self.responses.delete(response_id)
        try:
            name = f"{self.prefix}r:{response_id}"
            return bool(await self.link.call("response_delete", lambda: self.link.client.unlink(name), key=name))
        except StoreDown:
            return held

    # -- rollouts ------------------------------------------------------------------------

    async def begin_rollout(self, rollout_id: str, response_mask: list[int] | None) -> Pending:
        return await self._rollouts.begin(rollout_id, response_mask)

    async def commit_rollout(self, pending: Pending, record: TurnRecord, state: TokenState) -> None:
        await self._rollouts.commit(pending, record, state)

    async def export_rollout(self, rollout_id: str) -> dict[str, Any]:
        return await self._rollouts.export(rollout_id)

    async def delete_rollout(self, rollout_id: str) -> None:
        await self._rollouts.delete(rollout_id)

    async def rollout_summary(self, prefix: str = "") -> dict[str, Any]:
        held = await self._rollouts.summary(prefix)  # what the shared store holds (one tenant's, or all)
        if prefix:  # without the process's counters
            return {**self.rollouts.summary(prefix), **held, "backend": self.kind}
        return {**self.rollouts.summary(), **held, "backend": self.kind,
                "note": "counters are this process's; the rollouts themselves are in the shared store"}

    async def figures(self) -> dict[str, Any] | None:
        """The store's memory, keys, evictions and expirations, in all and by node (a cluster's
        masters): one INFO round trip to each, never a SCAN (a scrape must stay cheap)."""
        try:
            infos = await self.link.call("info", self.link.figures)
        except StoreDown:
            return None
        db = f"db{self.link.address.db}"
        nodes = {node: {"memory_bytes": int(info.get("used_memory", 0)),
                        "maxmemory_bytes": int(info.get("maxmemory", 0)),
                        "keys": int(info[db].get("keys", 0)) if isinstance(info.get(db), dict) else 0,
                        "evicted_keys": int(info.get("evicted_keys", 0)),
                        "expired_keys": int(info.get("expired_keys", 0))} for node, info in infos.items()}
        totals = {name: sum(figures[name] for figures in nodes.values())
                  for name in ("memory_bytes", "maxmemory_bytes", "keys", "evicted_keys", "expired_keys")}
        return {**totals, "nodes": nodes}

    async def close(self) -> None:
        await self.link.close()


def _extends(state: TokenState, held: TokenState, record: TurnRecord | None) -> bool:
    """`state`'s tokens start with all of `held`'s (so only the rest need be appended)."""
    n = len(held.tokens)
    if len(state.tokens) < n:
        return False
    if record is not None and record.spliced and record.prefix is held:
        return True  # the prompt was spliced onto exactly these tokens
    return state.tokens[:n] == held.tokens


def _resent(prefix: ResentPrefix | None) -> dict[str, Any] | None:
    if prefix is None:
        return None
    return {"start": prefix.start, "end": prefix.end, "digest": prefix.digest, "items": prefix.items,
            "instructions_end": prefix.instructions_end, "instructions_field": prefix.instructions_field}
