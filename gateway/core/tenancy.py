"""Whose request this is: the tenant its API key belongs to, and the namespace of its state.

The server's auth middleware (gateway/server/auth.py) sets `current` for the request (or the
whole WebSocket connection); the session pipeline reads it through `scoped`, so every
key a client chooses — `prompt_cache_key`, `rollout_id`, a stored response's id — is
looked up and stored as `"{tenant}:{key}"`. Another tenant's key then lands on an entry
that does not exist, by the same lookup an unknown key takes: no existence leak, no
timing difference. Without API keys there is no tenant and keys are stored as they are.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["TENANT_NAME", "Tenant", "current", "scoped", "tenant_prefix"]

# A tenant name never holds ':', so "{tenant}:{key}" names one (tenant, key) pair only.
TENANT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str  # the namespace of its state: the key file's name, else the key's fingerprint
    admin: bool = False  # the --admin-key: sees every tenant's state, by its full "tenant:id" name


current: ContextVar[Tenant | None] = ContextVar("tenant", default=None)


def scoped(key: str) -> str:
    """`key` as the current tenant's state is stored under (unchanged without one, or for the admin)."""
    tenant = current.get()
    return key if tenant is None or tenant.admin else f"{tenant.name}:{key}"


def tenant_prefix() -> str:
    """What every key of the current tenant's state starts with ("" for all state)."""
    tenant = current.get()
    return "" if tenant is None or tenant.admin else f"{tenant.name}:"
