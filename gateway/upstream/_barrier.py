"""The update barrier: while the fleet is paused for a weight update, new generations wait here.

A trainer pauses every replica, pushes weights, labels them and resumes
(gateway/upstream/control.py). vLLM itself queues what arrives while it is paused, so a
replica that resumed a moment before the others would serve that queue while another still
holds the old weights. The gateway instead holds new generations before they pick a replica,
from the pause until every replica has answered its resume, and then lets them all go: no
replica gets traffic between its own resume and the fleet's. A wait is bounded (`timeout`),
then answered 503 `fleet_paused` with Retry-After: a retryable error, not a hung client.
Generations already on a replica are not held here: a `keep` pause freezes them in vLLM, and
they go on after the resume; an `abort` pause ends them, and `aborts` counts such pauses, so a
generation that ended with "abort" knows whether the fleet cut it (to be resumed:
gateway/pipeline/partial_rollout.py) or something else did.
"""

from __future__ import annotations

import asyncio
import math

from gateway.core.errors import APIError

__all__ = ["Barrier"]


class Barrier:
    def __init__(self, timeout: float = 120.0) -> None:
        """`timeout`: seconds a new generation may wait for the fleet to resume."""
        self.timeout = timeout
        self.reason: str | None = None  # why it is closed ("paused", "sleeping"); None: open
        self.waiting = 0  # generations held now
        self.aborts = 0  # pauses (and sleeps) so far that ended the generations running on the replicas
        self._opened = asyncio.Event()
        self._opened.set()

    @property
    def closed(self) -> bool:
        return self.reason is not None

    def close(self, reason: str, *, aborting: bool = False) -> None:
        """`aborting`: the replicas end what they are running (vLLM's `mode=abort`)."""
        self.reason = reason
        self.aborts += aborting
        self._opened.clear()

    def open(self) -> None:
        self.reason = None
        self._opened.set()

    async def passed(self) -> None:
        """Return at once while open; else when it opens, or raise 503 `fleet_paused` after `timeout`."""
        if self.reason is None:
            return
        self.waiting += 1
        try:
            async with asyncio.timeout(self.timeout):
                await self._opened.wait()
        except TimeoutError:
            raise APIError(f"The model servers are {self.reason} for a weight update and did not resume within "
                           f"{self.timeout:g} s; retry shortly.", status=503, type="server_error",
                           code="fleet_paused", retry_after=max(1, math.ceil(self.timeout / 10))) from None
        finally:
            self.waiting -= 1
