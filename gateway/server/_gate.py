"""The server's gate (gateway/pipeline/gate.py): `--max-concurrent-requests`, then the tenant's limits.

The exchange enters it for every generation, over HTTP and WebSocket alike, so the budgets are
counted in one place: a request takes a server slot (gateway/server/_admission.py), then one of
its API key's tenant's (gateway/server/tenant_limits.py, in Redis with `--state-url`); refused by
either, it holds neither. Leaving gives both back and counts the tokens the request's
generations used against the tenant's minute. The tenant is the request's
(gateway/core/tenancy.py: the HTTP request's key, or the WebSocket handshake's for the life of
the connection).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.core import tenancy, tracing
from gateway.core.errors import APIError
from gateway.core.tenancy import Tenant
from gateway.pipeline.gate import Pass
from gateway.pipeline.request import TurnRequest
from gateway.server._admission import Admission
from gateway.server.tenant_limits import TenantLimits
from gateway.tokenfix.record import TurnRecord

__all__ = ["ServerGate"]


@dataclass(eq=False, slots=True)
class _Held:
    gate: ServerGate
    tenant: Tenant | None
    session: str  # the key the admission queue shares slots fairly by
    left: bool = False

    async def leave(self, records: Sequence[TurnRecord]) -> None:
        if self.left:
            return
        self.left = True
        try:
            if self.tenant is not None:
                await self.gate.limits.finish(self.tenant, records)
        finally:
            self.gate.admission.leave(self.session)


class ServerGate:
    def __init__(self, admission: Admission, limits: TenantLimits) -> None:
        self.admission = admission
        self.limits = limits

    async def enter(self, request: TurnRequest, waits: Callable[[], None] | None = None) -> Pass:
        session = request.session_key or request.connection_id or ""
        await self.admission.enter(session, request.sampling.tier, waits)
        tenant = tenancy.current.get()
        if tenant is not None:
            try:
                with tracing.phase("gateway.admission"):  # the tenant's limits: in Redis with --state-url
                    await self.limits.admit(tenant)
            except APIError:
                self.admission.leave(session)
                raise
        return _Held(self, tenant, session)
