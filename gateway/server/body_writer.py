"""Writing a started streaming response's body without an ASGI `send` per token.

At engine pace every token of every stream is its own client write, and an ASGI `send` of
it passes through each middleware's send wrapper (Starlette's two, the gateway's request-id
one) down to uvicorn's, which frames it as an HTTP chunk: a few microseconds per token in
wrappers that, once the response has started, do nothing with body bytes. The gateway
serves through its own subclass of uvicorn's httptools protocol, so it can offer the
application a synchronous writer for the response's transport as an ASGI scope extension,
`gateway.body_writer`: `BodyWriter.of(scope)` returns it, or None under another server (an
in-process test client), and the caller then sends through ASGI as usual.

The writer frames exactly what uvicorn's `send` would (a chunked body; the headers, the
status and the response's end still go through `send` and every middleware), honours
uvicorn's flow control (`paused` while the client's buffer is above its high-water mark:
wait for `drain()` before writing more), and refuses (returns False) whenever `send` would do
something other than write a chunk: the client gone, the response not started or complete,
a HEAD request, a body with a content-length.

Body bytes written this way pass no middleware: a middleware that must see or change them
(none of the gateway's does) wraps the writer in the scope it passes on, or removes it.
"""

from __future__ import annotations

from typing import Any

from starlette.types import Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

__all__ = ["BodyWriter", "DirectBodies"]

EXTENSION = "gateway.body_writer"


class BodyWriter:
    """Writes chunks of one request's response body straight to its transport."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = cycle

    @staticmethod
    def of(scope: Scope) -> BodyWriter | None:
        return scope.get("extensions", {}).get(EXTENSION)

    def write(self, body: bytes) -> bool:
        """Write `body` as one HTTP chunk; False (nothing written) where uvicorn's `send` must do it."""
        cycle = self._cycle
        if (not body or cycle.disconnected or not cycle.response_started or cycle.response_complete
                or not cycle.chunked_encoding):
            return False  # a HEAD response and a content-length body are never chunked
        cycle.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        return True

    @property
    def paused(self) -> bool:
        """The client's buffer is above the high-water mark: `drain()` before writing more."""
        return self._cycle.flow.write_paused and not self._cycle.disconnected

    async def drain(self) -> None:
        await self._cycle.flow.drain()


class DirectBodies(HttpToolsProtocol):
    """uvicorn's httptools protocol, offering each request a `BodyWriter` in its scope."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle: Any = self.cycle
        if cycle is not None and cycle.scope is self.scope:  # not an upgrade (WebSocket) handed on
            self.scope.setdefault("extensions", {})[EXTENSION] = BodyWriter(cycle)
