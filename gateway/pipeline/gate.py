"""The gate every generation passes: the server's budget of requests in flight, then its tenant's.

The exchange (gateway/pipeline/exchange.py) enters the gate before a turn renders or reaches a
replica and leaves it when the response has ended, its tokens counted against the tenant. The
exchange is the only way to a replica, so no route can skip the gate: POST /v1/responses (JSON,
SSE, background), /v1/responses/compact, Chat Completions, Anthropic Messages, the token-in
routes and every `response.create` on a WebSocket pass it alike.

The budgets are the server's (gateway/server/_admission.py, gateway/server/tenant_limits.py); the
pipeline sees only this interface. A runtime built without a server (tests, tools) has the open
gate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from gateway.pipeline.request import TurnRequest
from gateway.tokenfix.record import TurnRecord

__all__ = ["OPEN", "Gate", "Pass"]


class Pass(Protocol):
    """A place taken in the budgets, held until the response ends."""

    async def leave(self, records: Sequence[TurnRecord]) -> None:
        """Give the place back; `records` are the generations it served (their tokens are counted).
        Once: a second call does nothing."""


class Gate(Protocol):
    async def enter(self, request: TurnRequest, waits: Callable[[], None] | None = None) -> Pass:
        """A place for `request`, or APIError (429 with Retry-After) when a budget is spent;
        `waits` is called once if the request is queued to wait for its place (a full gateway)."""


class _Free:
    async def leave(self, records: Sequence[TurnRecord]) -> None:
        return None


class _Open:
    """No limits: every request passes."""

    async def enter(self, request: TurnRequest, waits: Callable[[], None] | None = None) -> Pass:
        return _FREE


_FREE = _Free()
OPEN: Gate = _Open()
