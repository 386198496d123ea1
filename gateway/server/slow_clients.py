"""What a slow or hostile client may hold: uvicorn's settings, plus the header bounds it lacks.

uvicorn's httptools protocol has no deadline on a request's headers (its keep-alive timer
only runs between requests, and any byte resets it) and no cap on their size, so a client
that sends its headers a byte at a time ("slowloris"), or endless header lines, holds a
connection and its buffers for as long as it likes. `BoundedHeaders` closes such a
connection: 408 when a request's line and headers take longer than `--header-timeout`
from its first byte (or from the connection's opening), 431 when they exceed
`MAX_HEADER_BYTES`, each (and uvicorn's 400 for a request it cannot parse) in the JSON error
shape of the API the request line names, as far as it came (Anthropic's for /v1/messages,
OpenAI's otherwise). Once the headers are in, the body has its own deadline
(`--request-body-timeout`, gateway/server/http.py) and a WebSocket's unread sends theirs
(`--client-write-timeout`, gateway/ws/connection.py).

uvicorn's WebSocket send waits for the write buffer to drain below its high-water mark
*before* writing, then returns: one large frame (a relay catching up sends many tokens at
once) lands whole in the buffer and the send is done, so a client that reads nothing holds
no pending send, and `--client-write-timeout` would never see it if no other send followed
(the replica still generating). `BoundedClose` waits *after* writing as well: a send returns
once the client has taken enough of it.

Closing a WebSocket whose client reads nothing needs a bound too: uvicorn's WebSocket
protocol makes `websocket.close` wait until the send buffer drains (never, for such a
client), and its close timer and ping timeout only `close()` the transport, which also waits
for the buffer to flush. `BoundedClose` aborts the TCP connection instead: at once when the
buffer is full as the application closes, `CLOSE_TIMEOUT` seconds after the close frame
otherwise.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import orjson
import uvicorn
from starlette.types import ASGIApp

from gateway.core.errors import APIError
from gateway.core.settings import Settings
from gateway.server._ws_frames import DirectFrames
from gateway.server.body_writer import DirectBodies
from gateway.server.http import error_payload

__all__ = ["uvicorn_config"]

MAX_HEADER_BYTES = 64 * 1024  # request line and headers; nginx's default is 32 KiB, h11's 16 KiB
CLOSE_TIMEOUT = 10.0  # seconds a WebSocket's close frame may wait for the client's reply (uvicorn's)


class BoundedHeaders(DirectBodies):
    """uvicorn's httptools protocol with a deadline and a size cap on each request's headers (and
    a direct body writer: gateway/server/body_writer.py)."""

    def __init__(self, *args: Any, header_timeout: float, max_header_bytes: int = MAX_HEADER_BYTES,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout = header_timeout
        self.max_header_bytes = max_header_bytes
        self._deadline: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._too_large = False
        self._path = b""  # the request line's target, as far as it came (its API decides the error's shape)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that never sends a byte is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0
        self._path = b""
        if self._deadline is None:  # a keep-alive connection's next request
            self._arm()

    def on_url(self, url: bytes) -> None:
        if len(self._path) < 64:
            self._path += url[:64]
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        if self._too_large:  # raised from a callback: the parser stopped, uvicorn answers here
            self._refuse(431, "Request Header Fields Too Large", f"The request line and headers exceed "
                         f"{self.max_header_bytes} bytes.", "request_header_fields_too_large")
        else:
            self._refuse(400, "Bad Request", f"{msg.rstrip('.')}: not a valid HTTP/1.1 request.",
                         "invalid_http_request")

    def _count(self, n_bytes: int) -> None:
        self._header_bytes += n_bytes
        if self._header_bytes > self.max_header_bytes:
            self._too_large = True
            raise ValueError("request headers too large")  # stops httptools' parse: send_400_response

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.header_timeout, self._timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self) -> None:
        self._deadline = None
        self._refuse(408, "Request Timeout", f"The request headers did not arrive within {self.header_timeout:g} s.",
                     "request_timeout")

    def _refuse(self, status: int, reason: str, message: str, code: str) -> None:
        if self.transport.is_closing():
            return
        path = self._path.decode("latin-1").partition("?")[0]
        body = orjson.dumps(error_payload(APIError(message, status=status, code=code), path))
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                             b"connection: close\r\n\r\n%s" % (status, reason.encode(), len(body), body))
        self.transport.close()


class BoundedClose(DirectFrames):
    """uvicorn's WebSocket protocol (websockets' sans-I/O one), whose close never waits forever (and
    which offers a direct text-message writer: gateway/server/_ws_frames.py)."""

    async def send(self, message: Any) -> None:
        closing = message["type"] == "websocket.close" and self.handshake_complete
        if closing and not self.writable.is_set():  # the client reads nothing: no close frame gets through
            self.transport.abort()
            return
        await super().send(message)
        if message["type"] == "websocket.send":
            await self.writable.wait()  # set again when the connection is lost: never waits on a gone client
        if closing and self.close_timer is not None:  # no reply to the close frame: abort, not close()
            self.close_timer.cancel()
            self.close_timer = self.loop.call_later(CLOSE_TIMEOUT, self.transport.abort)


def uvicorn_config(app: ASGIApp, settings: Settings, **kwargs: Any) -> uvicorn.Config:
    """The gateway's uvicorn settings (`kwargs`: host/port or none, when sockets are passed).

    WebSockets: frames up to `--max-request-bytes`; a ping every 20 s, closed when its pong does
    not come within 20 s (a client gone without a close); compressed when the client offers it."""
    # log_config=None: uvicorn's loggers keep the format main() configured (gateway/core/logs.py).
    return uvicorn.Config(app, log_level=settings.log_level, log_config=None,
                          http=partial(BoundedHeaders, header_timeout=settings.header_timeout),  # type: ignore[arg-type]
                          ws=BoundedClose, ws_per_message_deflate=True, ws_max_size=settings.max_body_bytes,
                          ws_ping_interval=20.0, ws_ping_timeout=20.0, **kwargs)
