"""Graceful drain on SIGTERM.

uvicorn alone would stop listening, close WebSockets at once with 1012 and cancel long
SSE streams after its own timeout. Instead, the first SIGTERM (or Ctrl-C) drains: new
requests and sockets get 503 and /ready turns 503 (so the load balancer stops sending)
while in-flight streams run on for up to `timeout` seconds; what is left then fails
cleanly (its upstream generation aborted, the client told `response.failed`), every
WebSocket is closed with 1001 (going away), and only then does uvicorn shut down.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.core.errors import shutting_down

__all__ = ["Drain", "DrainMiddleware", "GracefulServer"]

log = logging.getLogger(__name__)

GOING_AWAY = 1001
FAIL_GRACE = 5.0  # seconds for interrupted streams to send their failure and end
PROBE_PATHS = frozenset({"/health", "/ready", "/live", "/metrics"})  # still answered while draining


class Socket(Protocol):
    @property
    def busy(self) -> bool: ...  # a response is being generated

    def go_away(self) -> None: ...  # close with 1001, cancelling whatever still runs


class Drain:
    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.draining = False
        self.requests = 0  # HTTP requests in progress, streaming ones until their last byte
        self.sockets: set[Socket] = set()  # open WebSocket sessions

    @property
    def busy(self) -> bool:
        return self.requests > 0 or any(socket.busy for socket in self.sockets)

    async def run(self, interrupt: Callable[[], int]) -> None:
        """Drain; `interrupt()` fails every open upstream stream and says how many there were."""
        self.draining = True
        log.info("draining: %d requests, %d WebSockets open; waiting up to %.0f s", self.requests,
                 len(self.sockets), self.timeout)
        if not await _until(lambda: not self.busy, self.timeout):
            log.warning("drain deadline passed: stopping %d generations", interrupt())
            await _until(lambda: not self.busy, FAIL_GRACE)
        for socket in list(self.sockets):
            socket.go_away()
        await _until(lambda: not self.sockets, FAIL_GRACE)
        log.info("drained")


async def _until(done: Callable[[], bool], timeout: float) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while not done():
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


class DrainMiddleware:
    """Counts HTTP requests in progress; while draining, refuses new ones with 503."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in PROBE_PATHS:
            await self.app(scope, receive, send)
        elif self.drain.draining:
            await _refuse(scope, send)
        elif scope["type"] == "websocket":
            await self.app(scope, receive, send)  # the socket registers itself in drain.sockets
        else:
            self.drain.requests += 1
            try:
                await self.app(scope, receive, send)
            finally:
                self.drain.requests -= 1


async def _refuse(scope: Scope, send: Send) -> None:
    body = orjson.dumps(shutting_down().http_body())
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    elif "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": 503, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": GOING_AWAY})


class GracefulServer(uvicorn.Server):
    """uvicorn.Server whose first SIGTERM/SIGINT drains `app` before the usual shutdown;
    a second signal shuts down at once.

    Once started, what startup built (modules, the tokenizer, templates: ~all the process's
    container objects) is moved out of the garbage collector's generations (`gc.freeze`).
    Otherwise a full collection waits until the objects that outlived younger ones grow by a
    quarter of that heap, so the reference cycles a closed connection leaves (a WebSocket's
    compressor state among them) pile up for a long time and raise RSS steadily.
    """

    def __init__(self, config: uvicorn.Config, app: Starlette) -> None:
        super().__init__(config)
        self.app = app
        self._draining: asyncio.Task | None = None

    async def startup(self, sockets: list[Any] | None = None) -> None:
        await super().startup(sockets)
        gc.collect()
        gc.freeze()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._draining is not None or not self.started or sig not in (signal.SIGTERM, signal.SIGINT):
            super().handle_exit(sig, frame)
            return
        loop = asyncio.get_running_loop()  # signal handlers run on the event loop's (main) thread
        self._draining = loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            await self.app.state.drain.run(self.app.state.runtime.pool.interrupt)
        finally:
            self.should_exit = True
