"""Per-tenant limits counted in the shared Redis store, so N gateway processes or pods hold a
tenant to its limits together, not N times over (gateway/server/tenant_limits.py decides).

Per tenant, keys in one Redis Cluster slot (the tenant's hash tag, gateway/store/redis/keys.py),
touched by one script call (one round trip) per request:

- `{prefix}t:{{tenant}}:a`, a hash of the requests in flight by gateway process. A process
  holding requests of the tenant refreshes its liveness key there, `{prefix}t:{{tenant}}:p:{process}`
  (30 s TTL), while it runs; a count whose process stopped refreshing (killed with requests in
  flight) is dropped at the next admission, so a crash cannot hold a tenant's slots for good.
- `{prefix}t:{{tenant}}:s`, a sorted set of finished requests' tokens (`id:tokens`, scored by
  when they ended), trimmed to the last 60 s: the tokens-per-minute window.

Times are Redis's own (`TIME`), one clock for every process.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from functools import partial
from itertools import count

from gateway.store.redis.keys import tag
from gateway.store.redis.link import RedisLink, StoreDown

__all__ = ["RedisLimits"]

ALIVE_TTL = 30  # seconds a process's liveness key lives without a refresh
REFRESH = 10.0  # seconds between refreshes

# KEYS: in-flight hash, spent set. ARGV: process, concurrent limit (0: none), tokens per minute
# (0: none), liveness key prefix, window seconds. Returns {} (admitted) or {reason, retry_after}.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('SET', ARGV[4] .. ARGV[1], 1, 'EX', 30)
local limit = tonumber(ARGV[2])
if limit > 0 then
  local counts = redis.call('HGETALL', KEYS[1])
  local active = 0
  for i = 1, #counts, 2 do
    if redis.call('EXISTS', ARGV[4] .. counts[i]) == 1 then
      active = active + tonumber(counts[i + 1])
    else
      redis.call('HDEL', KEYS[1], counts[i])
    end
  end
  if active >= limit then return {'concurrency', 1} end
end
local budget = tonumber(ARGV[3])
if budget > 0 then
  local window = tonumber(ARGV[5])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  local spent = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  local total = 0
  for i = 1, #spent, 2 do total = total + tonumber(string.match(spent[i], ':(%d+)$')) end
  if total >= budget then
    for i = 1, #spent, 2 do  -- oldest first: each ages out of the window in turn
      total = total - tonumber(string.match(spent[i], ':(%d+)$'))
      if total < budget then
        return {'tokens', math.max(1, math.ceil(tonumber(spent[i + 1]) + window - now))}
      end
    end
  end
end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('EXPIRE', KEYS[1], 86400)
return {}
"""

# KEYS: in-flight hash, spent set. ARGV: process, tokens, a unique id, window seconds.
_GIVE_BACK = """
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
local tokens = tonumber(ARGV[2])
if tokens > 0 then
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[2], tonumber(t[1]) + tonumber(t[2]) / 1000000, ARGV[3] .. ':' .. tokens)
  redis.call('EXPIRE', KEYS[2], math.ceil(tonumber(ARGV[4])) + 60)
end
return 1
"""


class RedisLimits:
    """The shared counters; every call may raise `StoreDown` (the caller counts locally then)."""

    def __init__(self, link: RedisLink, key_prefix: str, window: float) -> None:
        self.link = link
        self.prefix = key_prefix
        self.window = window
        self.process = f"{os.getpid()}-{os.urandom(4).hex()}"
        self._ids = count()
        self._take = link.script(_TAKE)
        self._give_back = link.script(_GIVE_BACK)
        self._alive: asyncio.Task | None = None
        self._holding: Counter[str] = Counter()  # requests in flight here, by tenant

    async def take(self, tenant: str, concurrent: int | None, tokens_per_minute: int | None) -> tuple[str, int] | None:
        """None when admitted (one of its slots taken), else why not and the seconds to wait."""
        if self._alive is None:
            self._alive = asyncio.get_running_loop().create_task(self._stay_alive())
        keys = self._keys(tenant)
        args = [self.process, concurrent or 0, tokens_per_minute or 0, self._alive_prefix(tenant), self.window]
        reply = await self.link.call("tenant_take", lambda: self._take(keys=keys, args=args), key=keys[0])
        if reply:
            return reply[0].decode(), int(reply[1])
        self._holding[tenant] += 1
        return None

    async def give_back(self, tenant: str, tokens: int) -> None:
        """The slot `take` took, and the request's tokens into the window."""
        self._holding[tenant] -= 1
        if self._holding[tenant] <= 0:
            del self._holding[tenant]
        args = [self.process, tokens, f"{self.process}-{next(self._ids)}", self.window]
        keys = self._keys(tenant)
        await self.link.call("tenant_give_back", lambda: self._give_back(keys=keys, args=args), key=keys[0])

    async def _stay_alive(self) -> None:
        """This process's liveness, renewed beside the counts of every tenant it holds requests of."""
        while True:
            await asyncio.sleep(REFRESH)
            for tenant in list(self._holding):
                name = self._alive_prefix(tenant) + self.process
                try:
                    await self.link.call("tenant_alive", partial(self.link.client.set, name, 1, ex=ALIVE_TTL),
                                         key=name)
                except StoreDown:
                    pass  # counted as a fallback; the next take finds out again

    def close(self) -> None:
        if self._alive is not None:
            self._alive.cancel()

    def _keys(self, tenant: str) -> list[str]:
        tagged = tag(tenant)
        return [f"{self.prefix}t:{tagged}:a", f"{self.prefix}t:{tagged}:s"]

    def _alive_prefix(self, tenant: str) -> str:
        return f"{self.prefix}t:{tag(tenant)}:p:"
