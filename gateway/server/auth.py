"""API keys: who may use the gateway, and which tenant a request's state belongs to.

With any key configured (`--api-key`, `--api-key-file`, GATEWAY_API_KEY(S)), every route
but the probes (/health, /ready, /live) and the status page's shell (/status, /status.js)
needs one, as `Authorization: Bearer KEY` (OpenAI clients, Codex) or `x-api-key: KEY`
(Anthropic clients, Claude Code); /status.json needs the admin key; /metrics needs the
`--metrics-key` (or the admin key) when one is set, and is open otherwise. Without a key the
gateway is open, as before.

A key belongs to a tenant: the name after it in the key file, else the key's fingerprint
(the first 12 hex digits of its SHA-256, which is also all that is ever logged of a key).
The middleware puts the tenant in `gateway.core.tenancy.current` for the request — for a
WebSocket, for the whole connection — and the session pipeline namespaces its state by it.
The `--admin-key` is a tenant that sees every tenant's state.

Presented keys are hashed and compared with every configured key's digest by
`hmac.compare_digest`, without stopping at a match: how long a check takes says nothing
about the keys. A refusal answers in the API's own shape: 401 `invalid_api_key` (OpenAI),
`authentication_error` (Anthropic), or over WebSocket an error event then a close with
1008 (policy violation), as OpenAI's own WebSocket endpoints accept the upgrade and then
report a bad key in-band. Nothing of a refused request reaches a replica.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.core.errors import APIError
from gateway.core.settings import Settings
from gateway.core.tenancy import TENANT_NAME, Tenant, current
from gateway.pipeline import trace
from gateway.server._status import PAGE_PATHS
from gateway.server.http import error_response
from gateway.ws.error_events import error_event

__all__ = ["AuthMiddleware", "KeyRing", "warn_if_open"]

log = logging.getLogger(__name__)

# The probes, and the status page's shell (it holds no data: its /status.json needs the admin key).
OPEN_PATHS = frozenset({"/health", "/ready", "/live", *PAGE_PATHS})
POLICY_VIOLATION = 1008


def fingerprint(key: str) -> str:
    """What may be logged of a key."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


@dataclass
class KeyRing:
    """The configured keys, by digest: the tenants', the admin's, the metrics'."""

    tenants: list[tuple[bytes, Tenant]] = field(default_factory=list)
    metrics: list[bytes] = field(default_factory=list)

    @classmethod
    def load(cls, settings: Settings) -> KeyRing:
        """The keys of `settings`; ValueError when the key file is malformed."""
        ring = cls()
        named = [(key, None) for key in settings.api_keys]
        if settings.api_key_file:
            if not (listed := read_key_file(Path(settings.api_key_file))):  # never open by an empty Secret
                raise ValueError(f"{settings.api_key_file} holds no API key")
            named += listed
        for key, name in named:
            ring.tenants.append((_digest(key.encode()), Tenant(name or fingerprint(key))))
        if settings.admin_key:
            ring.tenants.append((_digest(settings.admin_key.encode()), Tenant("admin", admin=True)))
            ring.metrics.append(_digest(settings.admin_key.encode()))
        if settings.metrics_key:
            ring.metrics.append(_digest(settings.metrics_key.encode()))
        digests = [digest for digest, _ in ring.tenants]
        if len(set(digests)) != len(digests):
            raise ValueError("the same API key is configured twice")
        return ring

    @property
    def enabled(self) -> bool:
        return bool(self.tenants)

    def tenant(self, key: bytes) -> Tenant | None:
        digest, found = _digest(key), None
        for known, tenant in self.tenants:  # all of them, whichever matches
            if hmac.compare_digest(digest, known):
                found = tenant
        return found

    def opens_metrics(self, key: bytes | None) -> bool:
        if not self.metrics:
            return True
        digest = _digest(key or b"")
        return sum(hmac.compare_digest(digest, known) for known in self.metrics) > 0


def read_key_file(path: Path) -> list[tuple[str, str | None]]:
    """`key [tenant]` per line; blank lines and `#` comments are skipped (a key holds neither
    whitespace nor '#')."""
    keys: list[tuple[str, str | None]] = []
    for number, line in enumerate(_read(path).splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2 or (len(words) == 2 and not TENANT_NAME.fullmatch(words[1])):
            raise ValueError(f"{path}:{number}: expected 'KEY' or 'KEY TENANT' (a tenant name is 1-64 of "
                             f"A-Z a-z 0-9 _ . -)")
        keys.append((words[0], words[1] if len(words) == 2 else None))
    return keys


def presented_key(scope: Scope) -> bytes | None:
    """`Authorization: Bearer KEY`, else `x-api-key: KEY`."""
    api_key = None
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                return token.strip()
        elif name == b"x-api-key" and value:
            api_key = value
    return api_key


def refusal(key: bytes | None) -> APIError:
    if key is None:
        return APIError("Missing API key: send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'.",
                        status=401, code="invalid_api_key")
    return APIError("Incorrect API key provided.", status=401, code="invalid_api_key")


class AuthMiddleware:
    """Refuses requests without a valid key; runs the others as their key's tenant."""

    def __init__(self, app: ASGIApp, keys: KeyRing) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        key = presented_key(scope)
        if scope["path"] == "/metrics":
            if self.keys.opens_metrics(key):
                await self.app(scope, receive, send)
            else:
                await _refuse(scope, receive, send, refusal(key), "invalid" if key else "missing")
            return
        if not self.keys.enabled:
            await self.app(scope, receive, send)
            return
        tenant = self.keys.tenant(key) if key is not None else None
        if tenant is None:
            await _refuse(scope, receive, send, refusal(key), "invalid" if key else "missing")
            return
        if (traced := trace.current.get()) is not None:
            traced.tenant = tenant.name  # the access log line says whose request it was
        token = current.set(tenant)
        try:
            await self.app(scope, receive, send)
        finally:
            current.reset(token)


async def _refuse(scope: Scope, receive: Receive, send: Send, exc: APIError, reason: str) -> None:
    trace.error(exc)  # a traced request's access log line says why
    scope["app"].state.metrics.auth_refused.labels(reason).inc()
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": orjson.dumps(error_event(exc)).decode()})
        await send({"type": "websocket.close", "code": POLICY_VIOLATION, "reason": exc.code or ""})
        return
    response = error_response(exc, scope["path"])
    response.headers["www-authenticate"] = "Bearer"
    await response(scope, receive, send)


def warn_if_open(keys: KeyRing, host: str) -> None:
    """Without keys, anyone who reaches the port may generate and read every state: say so when
    that is more than this machine."""
    if keys.enabled:
        for digest, tenant in keys.tenants:
            log.info("API key %s: tenant %s%s", digest.hex()[:12], tenant.name, " (admin)" if tenant.admin else "")
        return
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        log.warning("no API key is configured and the gateway listens on %s: anyone who reaches it may generate "
                    "and read or continue every stored response, session and rollout (see --api-key)", host)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from exc
