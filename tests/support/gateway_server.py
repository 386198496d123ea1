"""Run the real gateway (uvicorn with the gateway's own protocol classes + the ASGI app) on a free
loopback port in a thread."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import httpx

from gateway.core.settings import Settings
from gateway.ops.vllm_process import free_port
from gateway.pipeline.runtime import Runtime
from gateway.server.app import create_app
from gateway.server.slow_clients import BoundedClose, BoundedHeaders
from tests.support.threaded_server import serve_in_thread
from tests.support.waiting import DEADLINE


@contextmanager
def running_gateway(settings: Settings, runtime: Runtime | None = None) -> Iterator[str]:
    """Yield the gateway's base URL (http://127.0.0.1:PORT) while it serves `settings`
    (with `runtime`, if given, so a test can look at its pool and caches)."""
    settings.port = settings.port if settings.port not in (0, 8080) else free_port()
    with serve_in_thread(create_app(settings, runtime), "the gateway", port=settings.port, timeout=60,
                         ws_per_message_deflate=True, ws=BoundedClose,
                         http=partial(BoundedHeaders, header_timeout=settings.header_timeout)):
        yield f"http://127.0.0.1:{settings.port}"


def wait_healthy(url: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(url + "/health").status_code == 200:
            return
        time.sleep(0.1)
    raise RuntimeError(f"{url} never became healthy")
