"""Serving the gateway app with uvicorn, until a signal drains it (in N processes: gateway/ops/_workers.py)."""

from __future__ import annotations

import sys

from gateway.core.settings import Settings

__all__ = ["run"]


def run(settings: Settings, workers: int = 1) -> None:
    from gateway.server.auth import KeyRing
    from gateway.server.tenant_limits import TenantLimits
    from gateway.store.redis.keys import check_prefix
    from gateway.store.redis.url import parse

    try:  # a malformed key or limits file, a --state-url it cannot use: stops here, before any worker starts
        KeyRing.load(settings), TenantLimits.load(settings)
        if settings.state_url:
            parse(settings.state_url)
            check_prefix(settings.state_key_prefix)
    except ValueError as exc:
        sys.exit(f"vllm-gateway: {exc}")
    if workers > 1:
        from gateway.ops._workers import WorkersError, serve_workers

        try:
            raise SystemExit(serve_workers(settings, workers))
        except WorkersError as exc:
            raise SystemExit(f"vllm-gateway: {exc}") from None
    from gateway.ops._malloc import pin_mmap_threshold
    from gateway.server.app import create_app
    from gateway.server.drain import GracefulServer
    from gateway.server.slow_clients import uvicorn_config

    pin_mmap_threshold()  # a big request's buffers are returned to the OS, not kept in the heap
    app = create_app(settings)
    GracefulServer(uvicorn_config(app, settings, host=settings.host, port=settings.port), app).run()
