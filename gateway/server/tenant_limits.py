"""Limits per tenant: model requests in flight and tokens per minute.

One tenant must not take the replicas from the others. Beyond its concurrent requests, or
once the tokens of its requests that ended within the last 60 s reach its per-minute budget,
a new request is refused at once with a 429 and `Retry-After` (as the server-wide
`--max-concurrent-requests`, gateway/server/_admission.py): for the token budget, the
seconds until enough of the window's tokens age out. A request's tokens (prompt sent and
output generated) are counted when it ends, so a request already admitted always runs to
its end. Limits come from `--tenant-max-concurrent-requests` / `--tenant-tokens-per-minute`
for every tenant, overridden per tenant by `--tenant-limits FILE`, one line per tenant:

    # tenant  limits           ('*': every tenant; a named tenant's line overrides it)
    *         concurrent=2
    alice     concurrent=8 tokens_per_minute=200000

Without API keys there are no tenants, and only the server-wide limit applies.

With a shared store (`--state-url`, and so with `--workers N`), the counts live in Redis
(gateway/store/redis/limits.py): every process and pod holds a tenant to its limits
together. While the store cannot answer, each process counts on its own (as without one).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gateway.core.errors import APIError
from gateway.core.settings import Settings
from gateway.core.tenancy import TENANT_NAME, Tenant
from gateway.server._metrics import Metrics
from gateway.store.backend import Store
from gateway.store.redis.link import StoreDown
from gateway.tokenfix.record import TurnRecord

__all__ = ["Limits", "TenantLimits"]

Ran = TurnRecord | Sequence[TurnRecord] | None  # what a request's slot served: its tokens are counted

WINDOW = 60.0
_FIELDS = ("concurrent", "tokens_per_minute")


@dataclass(frozen=True, slots=True)
class Limits:
    concurrent: int | None = None
    tokens_per_minute: int | None = None


@dataclass(slots=True)
class _Usage:
    active: int = 0
    spent: deque[tuple[float, int]] = field(default_factory=deque)  # (when, tokens) within the window
    in_window: int = 0


class TenantLimits:
    def __init__(self, default: Limits, named: dict[str, Limits] | None = None, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.default = default
        self.named = named or {}
        self.metrics = metrics
        self._clock = clock
        self._usage: dict[str, _Usage] = {}
        self.shared: Any = None  # RedisLimits, when the state store is shared
        self._held_shared: dict[str, int] = {}  # slots this process holds in the shared counts, by tenant

    @classmethod
    def load(cls, settings: Settings, metrics: Metrics | None = None) -> TenantLimits:
        default = Limits(settings.tenant_max_concurrent_requests, settings.tenant_tokens_per_minute)
        named = read_limits_file(Path(settings.tenant_limits), default) if settings.tenant_limits else {}
        return cls(named.pop("*", default), named, metrics)

    def limits(self, tenant: Tenant) -> Limits:
        return self.named.get(tenant.name, self.default)

    def share(self, store: Store) -> None:
        """Count in `store` when it is shared (Redis), so all processes count together."""
        if store.kind == "redis" and (self.named or self.default != Limits()):
            from gateway.store.redis.limits import RedisLimits

            self.shared = RedisLimits(store.link, store.prefix, WINDOW)  # type: ignore[attr-defined]

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()

    async def admit(self, tenant: Tenant) -> None:
        """`acquire`, counted in the shared store when there is one."""
        limits = self.limits(tenant)
        if self.shared is None or limits == Limits():
            self.acquire(tenant)
            return
        try:
            refused = await self.shared.take(tenant.name, limits.concurrent, limits.tokens_per_minute)
        except StoreDown:
            self.acquire(tenant)  # counted here alone until the store answers
            return
        if refused is not None:
            reason, wait = refused
            raise self._refused(tenant, reason, wait, f"its limit of {limits.concurrent} concurrent requests"
                                if reason == "concurrency" else f"its {limits.tokens_per_minute} tokens per minute")
        self._held_shared[tenant.name] = self._held_shared.get(tenant.name, 0) + 1
        if self.metrics is not None:
            self.metrics.tenant_in_progress.labels(tenant.name).inc()

    async def finish(self, tenant: Tenant, record: Ran = None) -> None:
        """`release` of a slot `admit` took."""
        if not self._held_shared.get(tenant.name):
            self.release(tenant, record)
            return
        self._held_shared[tenant.name] -= 1
        tokens = _tokens(record)
        if self.metrics is not None:
            self.metrics.tenant_in_progress.labels(tenant.name).dec()
            self.metrics.tenant_tokens.labels(tenant.name).inc(tokens)
        with contextlib.suppress(StoreDown):
            await self.shared.give_back(tenant.name, tokens)

    def acquire(self, tenant: Tenant) -> None:
        """Take one of the tenant's request slots, or raise the 429."""
        limits, usage = self.limits(tenant), self._usage.setdefault(tenant.name, _Usage())
        if limits.concurrent is not None and usage.active >= limits.concurrent:
            raise self._refused(tenant, "concurrency", 1, f"its limit of {limits.concurrent} concurrent requests")
        if limits.tokens_per_minute is not None:
            wait = self._wait(usage, limits.tokens_per_minute)
            if wait:
                raise self._refused(tenant, "tokens", wait,
                                    f"its {limits.tokens_per_minute} tokens per minute")
        usage.active += 1
        if self.metrics is not None:
            self.metrics.tenant_in_progress.labels(tenant.name).inc()

    def release(self, tenant: Tenant, record: Ran = None) -> None:
        """Give the slot back and count the request's tokens against the tenant's minute."""
        usage = self._usage[tenant.name]
        usage.active -= 1
        tokens = _tokens(record)
        if tokens:
            usage.spent.append((self._clock(), tokens))
            usage.in_window += tokens
        if self.metrics is not None:
            self.metrics.tenant_in_progress.labels(tenant.name).dec()
            self.metrics.tenant_tokens.labels(tenant.name).inc(tokens)

    def _wait(self, usage: _Usage, budget: int) -> int:
        """Seconds until the tokens of the last minute are under `budget` again (0: now)."""
        now = self._clock()
        while usage.spent and usage.spent[0][0] <= now - WINDOW:
            usage.in_window -= usage.spent.popleft()[1]
        remaining = usage.in_window
        for when, tokens in usage.spent:  # oldest first: each ages out of the window in turn
            if remaining < budget:
                break
            remaining -= tokens
            if remaining < budget:
                return max(1, math.ceil(when + WINDOW - now))
        return 0

    def _refused(self, tenant: Tenant, reason: str, retry_after: int, what: str) -> APIError:
        if self.metrics is not None:
            self.metrics.tenant_refused.labels(tenant.name, reason).inc()
        return APIError(f"This API key's tenant is over {what}; retry after {retry_after} s.", status=429,
                        type="rate_limit_error", code="rate_limit_exceeded", retry_after=retry_after)


def _tokens(ran: Ran) -> int:
    """The prompt tokens sent and the output generated (a prompt no replica took costs nothing)."""
    records = () if ran is None else (ran,) if isinstance(ran, TurnRecord) else ran
    return sum((record.input_tokens if record.replica is not None else 0) + len(record.output_ids)
               for record in records)


def read_limits_file(path: Path, default: Limits) -> dict[str, Limits]:
    """`TENANT key=value...` per line, keys `concurrent` and `tokens_per_minute`; `*` sets them for
    every tenant (over the flags' `default`), a named tenant's line over `*`'s. The `*` entry is
    the default for tenants not named."""
    lines: dict[str, dict[str, int]] = {}
    for number, line in enumerate(_read(path).splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        name, given = words[0], lines.setdefault(words[0], {})
        if name != "*" and not TENANT_NAME.fullmatch(name):
            raise ValueError(f"{path}:{number}: {name!r} is not a tenant name")
        for setting in words[1:]:
            key, _, value = setting.partition("=")
            if key not in _FIELDS or not value.isdigit() or int(value) < 1:
                raise ValueError(f"{path}:{number}: expected concurrent=N or tokens_per_minute=N (N >= 1), "
                                 f"got {setting!r}")
            given[key] = int(value)
    every = replace(default, **lines.pop("*", {}))
    return {"*": every, **{name: replace(every, **given) for name, given in lines.items()}}


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from exc
