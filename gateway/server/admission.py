"""A bounded number of model requests in flight per gateway process.

Beyond `--max-concurrent-requests`, a new request is refused at once with a 429 that
carries `Retry-After`, rather than queued behind a saturated replica: Codex retries a 429
only when it names a delay (without `Retry-After` it fails the turn), and waits exactly
that long. Over HTTP a slot is held for the whole response, streaming included; over
WebSocket for each `response.create` that generates. The slot is taken where every generation
starts, the exchange (through gateway/server/gate.py), so no generating route can skip it.
"""

from __future__ import annotations

from gateway.core.errors import APIError

__all__ = ["Admission"]

RETRY_AFTER_SECONDS = 1


def overloaded(limit: int) -> APIError:
    return APIError(f"The gateway is serving its limit of {limit} concurrent requests; retry after "
                    f"{RETRY_AFTER_SECONDS} s.", status=429, type="rate_limit_error", code="rate_limit_exceeded",
                    retry_after=RETRY_AFTER_SECONDS)


class Admission:
    def __init__(self, limit: int | None) -> None:
        self.limit = limit  # None: unlimited
        self.active = 0

    def acquire(self) -> None:
        """Take a slot, or raise the 429 when all are taken."""
        if self.limit is not None and self.active >= self.limit:
            raise overloaded(self.limit)
        self.active += 1

    def release(self) -> None:
        self.active -= 1
