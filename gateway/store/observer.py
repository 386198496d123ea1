"""What a shared state backend tells the rest of the gateway: its figures, and why a lookup
came back empty.

Both the backends (gateway/store/redis/) and the code that opens them
(gateway/store/backend.py) use these, so they live apart from either.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["FALLBACK", "StoreObserver"]

# Why the current request's last lookup found nothing although there may have been something
# (unreachable | full | lost), set by the shared backend; per request (task), never shared.
FALLBACK: ContextVar[str | None] = ContextVar("state_fallback", default=None)


class StoreObserver:
    """What a shared backend reports (gateway/server/_metrics.py counts it); does nothing here."""

    def round_trip(self, op: str, seconds: float) -> None:
        """One store operation (`op`: session_read, session_write, …) took `seconds`."""

    def moved(self, direction: str, n_bytes: int) -> None:
        """`n_bytes` of state were read (`direction`="read") or written ("write")."""

    def session_read(self, how: str) -> None:
        """`how`: "local" (the header said this process's tokens are current), "suffix" (only
        the missing tail was read), "full" (the whole log), "miss"."""

    def fallback(self, reason: str) -> None:
        """A turn could not use the shared state (`reason`: unreachable, full, conflict, lost)."""

    def node_failed(self, node: str, reason: str) -> None:
        """A call on `node` (host:port: a cluster's master, a single Redis, the master the sentinels
        named last) failed."""
