"""Run the real gateway (uvicorn + the ASGI app) on a free loopback port in a thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn

from gateway.app import create_app
from gateway.runtime import Runtime
from gateway.settings import Settings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running_gateway(settings: Settings, runtime: Runtime | None = None) -> Iterator[str]:
    """Yield the gateway's base URL (http://127.0.0.1:PORT) while it serves `settings`
    (with `runtime`, if given, so a test can look at its pool and caches)."""
    settings.port = settings.port if settings.port not in (0, 8080) else free_port()
    config = uvicorn.Config(create_app(settings, runtime), host="127.0.0.1", port=settings.port, log_level="warning",
                            ws_per_message_deflate=True)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{settings.port}"
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the gateway did not start")
        time.sleep(0.02)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def wait_healthy(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(url + "/health").status_code == 200:
            return
        time.sleep(0.1)
    raise RuntimeError(f"{url} never became healthy")
