"""Run an ASGI app on a loopback port with uvicorn in a daemon thread, for the length of a `with`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from gateway.ops.vllm_process import free_port


@contextmanager
def serve_in_thread(app: Any, what: str, *, port: int | None = None, timeout: float = 30.0,
                    **config: Any) -> Iterator[int]:
    """Yield the port `app` listens on once uvicorn has started; `what` names it in errors."""
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)
