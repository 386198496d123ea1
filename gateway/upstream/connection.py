"""Keep-alive HTTP/1.1 connections to one replica, for the token streams.

vLLM hands every running stream one token per engine step, each on its own connection, so
what one upstream read costs decides how many streams a gateway core can relay. Here a read
costs one `data_received`: httptools (C) parses the status line, headers and chunked framing
and hands the decoded body bytes over in one call to the request's `Receiver`; nothing in
between is an async generator or a task. `Connections` keeps a replica's idle connections in
a deque, so a checkout is a pop, and a finished response puts its connection back at once.

httpx stays for the control calls (health, models, abort, warmup): they are rare.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol
from urllib.parse import urlsplit

import httptools

__all__ = ["ConnectError", "ConnectTimeout", "Connection", "Connections", "IdleTimeout", "Stale"]

CONNECT_TIMEOUT = 5.0  # seconds to open a TCP connection
MAX_IDLE = 256  # idle connections kept per replica; more are closed when they come back


class ConnectError(Exception):
    """No connection could be opened, or it broke before the replica answered a byte."""


class ConnectTimeout(ConnectError):
    """No connection opened within CONNECT_TIMEOUT: the replica may only be busy (a refusal means
    it is gone)."""


class Stale(ConnectError):
    """A kept-alive connection the replica had closed (its keep-alive timeout): the request never got
    there, so it is sent again on a new connection."""


class ConnectionBroken(Exception):
    """The connection broke, or its response could not be parsed, once the replica had answered."""


class IdleTimeout(ConnectionBroken):
    """The replica sent nothing for the idle timeout while the stream was being read."""


class Receiver(Protocol):
    """Where a response goes: the connection calls these, in this order, from the event loop."""

    def on_headers(self, status: int) -> None: ...

    def on_body(self, data: bytes) -> None:
        """Body bytes (chunked framing removed), all of one read at once."""

    def on_end(self, error: Exception | None) -> None:
        """The response ended (`error` None) or broke; called exactly once."""


class Connection(asyncio.Protocol):
    """One TCP connection: sends a request, feeds its response to a Receiver."""

    def __init__(self, owner: Connections) -> None:
        self._owner = owner
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._receiver: Receiver | None = None
        self._body: list[bytes] = []  # this read's body pieces (httptools calls on_body per chunk)
        self._answered = False  # the replica sent a byte of this response
        self._complete = False  # the response's end was parsed
        self._keep_alive = False  # and it allows another request on this connection
        self._paused = False
        self._last_read = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self.closed = False
        self.idle = False  # in its owner's idle deque
        self.reused = False  # served a response before this one (a stale keep-alive may break at once)

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._receiver is None:  # bytes on an idle connection: nothing is asked, so it is broken
            self.close()
            return
        self._answered = True
        self._last_read = self._loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionBroken(f"unparseable response: {exc!r}"))
            return
        if self._body:
            body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
            self._body.clear()
            if self._receiver is not None:
                self._receiver.on_body(body)
        if self._complete:
            self._finish()

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._owner.forget(self)
        if self._receiver is not None:
            if not self._answered:
                error = Stale if self.reused else ConnectError
                self._fail(error(f"connection closed before the replica answered: {exc!r}"))
            else:
                self._fail(ConnectionBroken(f"peer closed the connection mid-response: {exc!r}"))

    # httptools callbacks
    def on_headers_complete(self) -> None:
        if self._receiver is not None:
            self._receiver.on_headers(self._parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._complete = True
        self._keep_alive = self._parser.should_keep_alive()  # only known here: the parser resets after

    @property
    def paused(self) -> bool:
        """Reading is held back for a slow receiver."""
        return self._paused

    # the request side
    def send(self, request: bytes, receiver: Receiver, idle_timeout: float | None) -> None:
        """Write `request`; its response goes to `receiver`."""
        self._receiver = receiver
        self._answered = self._complete = False
        self._last_read = self._loop.time()
        if idle_timeout is not None:
            self._idle_timer = self._loop.call_later(idle_timeout, self._check_idle, idle_timeout)
        self._transport.write(request)  # type: ignore[union-attr]

    def pause(self) -> None:
        """The receiver holds enough unread: stop reading until `resume` (the kernel buffers, then TCP
        pushes back on the replica)."""
        if not self._paused and not self.closed:
            self._paused = True
            self._transport.pause_reading()  # type: ignore[union-attr]

    def resume(self) -> None:
        if self._paused and not self.closed:
            self._paused = False
            self._last_read = self._loop.time()  # paused time is the client's, not the replica's
            self._transport.resume_reading()  # type: ignore[union-attr]

    def close(self) -> None:
        """Drop the connection (a replica aborts a generation whose connection closes)."""
        self._receiver = None
        self._cancel_timer()
        if self._transport is not None and not self.closed:
            self._transport.close()
        self.closed = True
        self._owner.forget(self)

    def _finish(self) -> None:
        receiver, self._receiver = self._receiver, None
        self._cancel_timer()
        self._parser = httptools.HttpResponseParser(self)
        if self._keep_alive:
            self.resume()  # the response is complete: nothing of it is left to hold back
            self.reused = True
            self._owner.release(self)
        else:
            self.close()
        if receiver is not None:
            receiver.on_end(None)

    def _fail(self, error: Exception) -> None:
        receiver, self._receiver = self._receiver, None
        self.close()
        if receiver is not None:
            receiver.on_end(error)

    def _check_idle(self, idle_timeout: float) -> None:
        silent = self._loop.time() - self._last_read
        if self._paused or silent < idle_timeout:
            self._idle_timer = self._loop.call_later(idle_timeout - (0 if self._paused else silent),
                                                           self._check_idle, idle_timeout)
        else:
            self._idle_timer = None
            self._fail(IdleTimeout(f"nothing read for {idle_timeout:g} s"))

    def _cancel_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None


class Connections:
    """One replica's connections: idle ones in a deque (newest last), the rest counted as busy."""

    def __init__(self, url: str, *, idle_timeout: float | None = 300.0, max_idle: int = MAX_IDLE) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "localhost"
        self.port = parts.port or 80
        self.idle_timeout = idle_timeout
        self._host_header = parts.netloc.encode()
        self._idle: deque[Connection] = deque()
        self._max_idle = max_idle
        self._busy: set[Connection] = set()
        self.opened = 0  # connections opened, ever

    def request_bytes(self, path: str, body: bytes, headers: bytes = b"") -> bytes:
        """A POST of `body`; `headers`: more header lines, each ending in CRLF (a `traceparent`)."""
        return (b"POST %s HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%b\r\n"
                % (path.encode(), self._host_header, len(body), headers)) + body

    async def send(self, request: bytes, receiver: Receiver) -> Connection:
        """Send on an idle connection, else a new one; raises ConnectError if none opens."""
        while self._idle:
            connection = self._idle.pop()
            connection.idle = False
            if not connection.closed:
                break
        else:
            connection = await self._connect()
        self._busy.add(connection)
        connection.send(request, receiver, self.idle_timeout)
        return connection

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                _, connection = await loop.create_connection(lambda: Connection(self), self.host, self.port)
        except TimeoutError as exc:  # the deadline, or the kernel's ETIMEDOUT
            raise ConnectTimeout(f"connection to {self.host}:{self.port} timed out: {exc!r}") from exc
        except (OSError, AttributeError) as exc:  # a peer dying while we connect, too
            raise ConnectError(f"connection to {self.host}:{self.port} failed: {exc!r}") from exc
        self.opened += 1
        return connection

    def release(self, connection: Connection) -> None:
        """A finished response's connection: kept for the next request, or closed if enough are idle."""
        self._busy.discard(connection)
        if len(self._idle) < self._max_idle:
            connection.idle = True
            self._idle.append(connection)
        else:
            connection.close()

    def forget(self, connection: Connection) -> None:
        self._busy.discard(connection)
        if connection.idle:  # an idle connection the replica closed (its keep-alive timeout)
            connection.idle = False
            self._idle.remove(connection)

    @property
    def n_idle(self) -> int:
        return len(self._idle)

    def close(self) -> None:
        """Close the idle connections (busy ones close when their streams end)."""
        while self._idle:
            connection = self._idle.pop()
            connection.idle = False
            connection.close()
