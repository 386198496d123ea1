"""Rollouts in Redis: the trajectory as append-only logs, one script call per model call.

Keys under `{prefix}ro:{{id}}` (one Redis Cluster hash tag, so one slot, per rollout:
gateway/store/redis/keys.py): a header hash (`v` calls so far, `n` tokens, `closed`
segments, `seg` where the open segment starts, `meta` its `TokenState` metadata), and
logs appended to by every call: `:t` int32 tokens (all segments in order), `:m` the loss
mask (one byte per token), `:l` float64 logprobs (one per generated token), `:u` one JSON
record per call. A call commits only if the header is still at the version it began
from; a call that lost that race (another process's call on the rollout committed in
between) is recorded again as a new segment, flagged `non_monotonic`, as within one process.

A rollout that is gone leaves a tombstone (`{prefix}rg:{{id}}`: why, in the rollout's slot),
so asking for it answers 410 with the reason. One that the store lost without a tombstone
(Redis restarted empty, or evicted it under maxmemory) is known to be lost by a process that
saw it alive; while Redis is unreachable, rollout calls answer 503 (retryable) rather than
start over.
"""

from __future__ import annotations

import dataclasses
import re
from array import array
from collections import OrderedDict
from functools import partial
from typing import Any

from gateway.core.errors import APIError
from gateway.store.redis import _codec as codec
from gateway.store.redis.keys import tag, tag_start
from gateway.store.redis.link import RedisLink, StoreDown
from gateway.store.rollouts import Pending, Rollout, RolloutStore, RolloutTurn, addition
from gateway.tokenfix.record import TurnRecord
from gateway.tokenfix.state import TokenState

__all__ = ["RedisRollouts"]

TOMBSTONE_TTL = 7 * 24 * 3600  # seconds a gone rollout's reason is kept
MAX_KNOWN = 100_000  # rollout ids this process saw alive, to tell "lost" from "never existed"
MAX_HELD = 256  # open segments kept here, so a call that follows this process's own reads only the header
_TURN_FIELDS = frozenset(f.name for f in dataclasses.fields(RolloutTurn))

# Returns {} + the tombstone (or nothing) when the rollout is not there, else the header and
# the open segment's tokens (skipped when ARGV[1], the version held here, is current).
_BEGIN = """
local h = redis.call('HMGET', KEYS[1], 'v', 'n', 'closed', 'seg', 'meta')
if not h[1] then return {redis.call('GET', KEYS[2])} end
for _, suffix in ipairs({'', ':t', ':m', ':l', ':u'}) do redis.call('PEXPIRE', KEYS[1] .. suffix, ARGV[2]) end
if h[1] == ARGV[1] then return {h[1], h[2], h[3], h[4], h[5]} end
return {h[1], h[2], h[3], h[4], h[5], redis.call('GETRANGE', KEYS[1] .. ':t', tonumber(h[4]) * 4, tonumber(h[2]) * 4 - 1)}
"""

# ARGV: expected version, new segment (0/1), tokens, mask, logprobs, call record, open segment
# metadata, TTL ms. Returns the new version, 0 when the rollout moved on, -1 when it is gone.
_COMMIT = """
local h = redis.call('HMGET', KEYS[1], 'v', 'n', 'closed', 'seg')
local v = tonumber(h[1] or '0')
if v ~= tonumber(ARGV[1]) then
  if not h[1] then return -1 end
  return 0
end
local n, closed, seg = tonumber(h[2] or '0'), tonumber(h[3] or '0'), tonumber(h[4] or '0')
if ARGV[2] == '1' then
  if n > 0 then closed = closed + 1 end
  seg = n
end
redis.call('APPEND', KEYS[1] .. ':t', ARGV[3])
redis.call('APPEND', KEYS[1] .. ':m', ARGV[4])
redis.call('APPEND', KEYS[1] .. ':l', ARGV[5])
redis.call('RPUSH', KEYS[1] .. ':u', ARGV[6])
redis.call('HSET', KEYS[1], 'v', v + 1, 'n', n + string.len(ARGV[3]) / 4, 'closed', closed, 'seg', seg,
           'meta', ARGV[7])
for _, suffix in ipairs({'', ':t', ':m', ':l', ':u'}) do redis.call('PEXPIRE', KEYS[1] .. suffix, ARGV[8]) end
return v + 1
"""

# A branch starts as its parent's copy. The two are different rollouts, so (on a cluster) in
# different slots: the parent's five keys are read in one script (DUMP; '' for a missing one, {}
# when the parent is gone) and written in another unless the branch exists (RESTORE with the TTL
# in ms, ARGV[6]). Returns 1 when copied, 0 when the branch exists.
_FORK_READ = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
local dumps = {}
for i, suffix in ipairs({'', ':t', ':m', ':l', ':u'}) do dumps[i] = redis.call('DUMP', KEYS[1] .. suffix) or '' end
return dumps
"""
_FORK_WRITE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
for i, suffix in ipairs({'', ':t', ':m', ':l', ':u'}) do
  if ARGV[i] ~= '' then redis.call('RESTORE', KEYS[1] .. suffix, ARGV[6], ARGV[i]) end
end
return 1
"""

# The whole trajectory: the header's `seg` and `v`, the three logs, the call records, the tombstone.
_EXPORT = """
local h = redis.call('HMGET', KEYS[1], 'seg', 'v')
return {h[1] or '', h[2] or '', redis.call('GET', KEYS[1] .. ':t') or '', redis.call('GET', KEYS[1] .. ':m') or '',
        redis.call('GET', KEYS[1] .. ':l') or '', redis.call('LRANGE', KEYS[1] .. ':u', 0, -1),
        redis.call('GET', KEYS[2]) or ''}
"""

# The rollout's keys go, its tombstone (ARGV[1], kept ARGV[2] seconds) stays.
_DELETE = """
redis.call('UNLINK', KEYS[1], KEYS[1] .. ':t', KEYS[1] .. ':m', KEYS[1] .. ':l', KEYS[1] .. ':u')
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
return 1
"""


class SharedPending(Pending):
    """A call on a rollout in Redis: where the rollout was when the call began."""

    def __init__(self, store: RolloutStore, rollout_id: str, rollout: Rollout | None,
                 response_mask: list[int] | None, header: tuple[int, int, int]) -> None:
        super().__init__(store, rollout_id, rollout, response_mask)
        self.version, self.num_tokens, self.closed = header


class RedisRollouts:
    def __init__(self, link: RedisLink, local: RolloutStore, prefix: str) -> None:
        self.link = link
        self.local = local  # its counters; its settings (TTL)
        self.prefix = prefix
        self._begin = link.script(_BEGIN)
        self._commit = link.script(_COMMIT)
        self._fork_read = link.script(_FORK_READ)
        self._fork_write = link.script(_FORK_WRITE)
        self._export = link.script(_EXPORT)
        self._delete = link.script(_DELETE)
        self._known: OrderedDict[str, None] = OrderedDict()  # ids seen alive
        self._held: OrderedDict[str, tuple[int, TokenState | None]] = OrderedDict()  # id -> version, open segment

    async def begin(self, rollout_id: str, response_mask: list[int] | None) -> SharedPending:
        key, gone = self._keys(rollout_id)
        held = self._held.get(rollout_id)
        args = [held[0] if held is not None else -1, int(self.local.ttl * 1000)]
        try:
            reply = await self.link.call("rollout_begin", lambda: self._begin(keys=[key, gone], args=args), key=key)
        except StoreDown as exc:
            raise _unavailable(rollout_id, exc.reason) from exc
        if len(reply) == 1:
            if reply[0] is not None:
                raise _gone(rollout_id, reply[0].decode())
            if rollout_id in self._known:
                await self._tombstone(rollout_id, _LOST)
                raise _gone(rollout_id, _LOST)
            return SharedPending(self.local, rollout_id, None, response_mask, (0, 0, 0))
        version, n_tokens, closed = (int(x) for x in reply[:3])
        if len(reply) == 6:
            self.link.observer.moved("read", len(reply[5]) + len(reply[4]))
            state = codec.state_from(codec.loads(reply[4]), codec.ids_from_bytes(reply[5]))
            self._remember(rollout_id, version, state)
        else:
            assert held is not None
            state = held[1]
        return SharedPending(self.local, rollout_id, Rollout(rollout_id, state=state), response_mask,
                             (version, n_tokens, closed))

    async def commit(self, pending: Pending, record: TurnRecord, state: TokenState) -> None:
        assert isinstance(pending, SharedPending)
        continues = True
        if pending.fork_from is not None and pending.version > 0:  # a branch starts as its parent's copy
            parent, branch = self._keys(pending.fork_from)[0], self._keys(pending.rollout_id)[0]
            try:
                dumps = await self.link.call("rollout_fork", partial(self._fork_read, keys=[parent]), key=parent)
                if dumps:
                    args = [*dumps, int(self.local.ttl * 1000)]
                    await self.link.call("rollout_fork", partial(self._fork_write, keys=[branch], args=args),
                                         n_sent=sum(map(len, dumps)), key=branch)
            except StoreDown:
                return
        for _ in range(2):
            added = addition(pending, record, state, continues=continues, num_tokens=pending.num_tokens,
                             closed=pending.closed, has_open=pending.num_tokens > 0, has_turns=pending.version > 0)
            turn = added.turn
            args = [pending.version, int(added.new_segment), codec.ids_to_bytes(added.tokens), added.mask,
                    added.logprobs.tobytes(), codec.dumps(turn.export(pending.version)),
                    codec.dumps(codec.state_meta(state)), int(self.local.ttl * 1000)]
            key, _ = self._keys(pending.rollout_id)
            try:
                version = await self.link.call("rollout_commit", partial(self._commit, keys=[key], args=args),
                                                n_sent=sum(len(a) for a in args[2:7]), key=key)
            except StoreDown:
                return  # the call's tokens are not in the trajectory: the next call starts a new segment
            if version > 0:
                self.local.stats.turns += 1
                self.local.stats.created += pending.version == 0
                self._remember(pending.rollout_id, version, state)
                return
            if version < 0:  # gone while the call ran (deleted, expired, lost): its next request gets the 410
                return
            self.link.observer.fallback("conflict")
            try:  # another call committed first: this one becomes a new segment after it
                pending = await self.begin(pending.rollout_id, pending.response_mask)
            except APIError:
                return
            continues = False

    async def export(self, rollout_id: str) -> dict[str, Any]:
        key, gone = self._keys(rollout_id)

        try:
            seg, version, tokens, mask, logprobs, turns, why = await self.link.call(
                "rollout_export", lambda: self._export(keys=[key, gone]), key=key)
        except StoreDown as exc:
            raise _unavailable(rollout_id, exc.reason) from exc
        if not version:
            if why:
                raise _gone(rollout_id, why.decode())
            if rollout_id in self._known:
                raise _gone(rollout_id, _LOST)
            raise APIError(f"No rollout with id '{rollout_id}'.", status=404, param="rollout_id",
                           code="rollout_not_found")
        self.link.observer.moved("read", len(tokens or b"") + len(mask or b"") + len(logprobs or b""))
        ids = codec.ids_from_bytes(tokens or b"")
        start = int(seg)
        values = array("d")
        values.frombytes(logprobs or b"")
        rollout = Rollout(rollout_id, closed=[ids[:start]], mask=bytearray(mask or b""), logprobs=values,
                          state=TokenState(b"", 0, b"", ids[start:], 0, 0),
                          turns=[RolloutTurn(**{k: v for k, v in codec.loads(t).items() if k in _TURN_FIELDS})
                                 for t in turns])
        return rollout.export()

    async def summary(self, prefix: str) -> dict[str, int]:
        """The rollouts the store holds whose id starts with `prefix` (one tenant's) and their tokens:
        a SCAN of the rollout headers, for a stats request, never on a model call's path."""
        pattern = f"{self.prefix}ro:{_glob_literal(tag_start(prefix))}*"

        async def count() -> list[Any]:
            keys = [key async for key in self.link.client.scan_iter(match=pattern, count=1000, _type="HASH")]
            async with self.link.client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hget(key, "n")
                return await pipe.execute()

        try:
            sizes = await self.link.call("rollout_summary", count)
        except StoreDown as exc:
            raise APIError(f"The rollouts cannot be counted now: the shared state store is {exc.reason}. Retry.",
                           status=503, type="server_error", code="state_store_unavailable") from exc
        return {"rollouts": len(sizes), "tokens": sum(int(n or 0) for n in sizes)}

    async def delete(self, rollout_id: str) -> None:
        await self.export(rollout_id)  # 404 or 410 as for GET
        key, gone = self._keys(rollout_id)

        try:
            await self.link.call("rollout_delete",
                                 lambda: self._delete(keys=[key, gone], args=["deleted", TOMBSTONE_TTL]), key=key)
        except StoreDown as exc:
            raise _unavailable(rollout_id, exc.reason) from exc
        self._forget(rollout_id)
        self.local.stats.deleted += 1

    async def _tombstone(self, rollout_id: str, why: str) -> None:
        self._forget(rollout_id)
        try:
            gone = self._keys(rollout_id)[1]
            await self.link.call("rollout_tombstone", lambda: self.link.client.set(gone, why, ex=TOMBSTONE_TTL),
                                 key=gone)
        except StoreDown:
            pass

    def _remember(self, rollout_id: str, version: int, state: TokenState | None) -> None:
        self._known[rollout_id] = None
        self._known.move_to_end(rollout_id)
        while len(self._known) > MAX_KNOWN:
            self._known.popitem(last=False)
        self._held[rollout_id] = (version, state)
        self._held.move_to_end(rollout_id)
        while len(self._held) > MAX_HELD:
            self._held.popitem(last=False)

    def _forget(self, rollout_id: str) -> None:
        self._known.pop(rollout_id, None)
        self._held.pop(rollout_id, None)

    def _keys(self, rollout_id: str) -> tuple[str, str]:
        tagged = tag(rollout_id)
        return f"{self.prefix}ro:{tagged}", f"{self.prefix}rg:{tagged}"


_LOST = ("lost by the shared state store (Redis restarted without its data, was flushed, or evicted it under "
         "maxmemory)")


def _glob_literal(text: str) -> str:
    """`text`, matched literally by a Redis glob pattern."""
    return re.sub(r"([\\*?\[\]])", r"\\\1", text)


def _gone(rollout_id: str, why: str) -> APIError:
    return APIError(f"Rollout '{rollout_id}' is gone: {why}. Its trajectory can no longer be exported or "
                    f"continued.", status=410, param="rollout_id", code="rollout_gone")


def _unavailable(rollout_id: str, reason: str) -> APIError:
    return APIError(f"Rollout '{rollout_id}' cannot be read now: the shared state store is {reason}. Retry; the "
                    f"gateway does not start a rollout over without its earlier calls.", status=503,
                    type="server_error", param="rollout_id", code="state_store_unavailable")
