"""A bounded number of model requests in flight per gateway process, and the order a full
gateway serves the ones that wait.

Beyond `--max-concurrent-requests`, a new request is refused at once with a 429 that
carries `Retry-After`, rather than queued behind a saturated replica: Codex retries a 429
only when it names a delay (without `Retry-After` it fails the turn), and waits exactly
that long. With `--max-queued-requests N`, up to N requests wait for a slot instead (beyond: the
429), served in the order vLLM serves its own queue (gateway/core/service_tier.py): by service
tier, then by how many of its session's requests are already in or waiting at the gate (one
agent's burst waits behind another agent's turn), then by arrival. Over HTTP a slot is held for
the whole response, streaming included; over WebSocket for each `response.create` that
generates. The slot is taken where every generation starts, the exchange (through
gateway/server/_gate.py), so no generating route can skip it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter
from collections.abc import Callable

from gateway.core.errors import APIError
from gateway.core.service_tier import Tier, served_order

__all__ = ["Admission"]

RETRY_AFTER_SECONDS = 1


def overloaded(limit: int) -> APIError:
    return APIError(f"The gateway is serving its limit of {limit} concurrent requests; retry after "
                    f"{RETRY_AFTER_SECONDS} s.", status=429, type="rate_limit_error", code="rate_limit_exceeded",
                    retry_after=RETRY_AFTER_SECONDS)


class Admission:
    def __init__(self, limit: int | None, queue: int = 0) -> None:
        self.limit = limit  # None: unlimited
        self.queue = queue  # requests that may wait for a slot (0: a full gateway refuses at once)
        self.active = 0
        self._waiting: list[tuple[tuple[int, int, int], asyncio.Future[None]]] = []  # a heap, by order
        self._sessions: Counter[str] = Counter()  # requests in or waiting, per session key
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def enter(self, session: str, tier: Tier, waits: Callable[[], None] | None = None) -> None:
        """Take a slot for a request of `session`, waiting in order for one when the gateway is
        full and the queue has room (`waits` is called then, once queued); the 429 otherwise.
        Give it back with `leave(session)`."""
        if self.limit is None or (self.active < self.limit and not self._waiting):
            self.active += 1
            self._sessions[session] += 1
            return
        if len(self._waiting) >= self.queue:
            raise overloaded(self.limit)
        order = (served_order(tier), self._sessions[session], next(self._arrivals))
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (order, turn))
        self._sessions[session] += 1
        try:
            if waits is not None:
                waits()
            await turn  # `release` hands this request the slot it frees
        except BaseException:
            self._forget(session)
            if turn.done() and not turn.cancelled():
                self.release()  # handed a slot just as the client left: pass it on
            else:
                self._waiting = [entry for entry in self._waiting if entry[1] is not turn]
                heapq.heapify(self._waiting)
            raise

    def leave(self, session: str) -> None:
        self._forget(session)
        self.release()

    def release(self) -> None:
        """Give a slot back: to the first waiting request, in order, if any."""
        while self._waiting:
            _, turn = heapq.heappop(self._waiting)
            if not turn.done():
                turn.set_result(None)
                return
        self.active -= 1

    def _forget(self, session: str) -> None:
        left = self._sessions[session] - 1
        if left > 0:
            self._sessions[session] = left
        else:
            del self._sessions[session]
