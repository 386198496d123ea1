"""The pool's HTTP transport: httpx's own, with one leak plugged.

When a replica dies while a connection to it is being opened, httpcore (through anyio) can
raise a bare AttributeError or OSError instead of an httpx error: the socket is already
closed when it asks for the peer's address. For the gateway that is a connection failure
like any other (eject, retry elsewhere), so it is raised as one.
"""

from __future__ import annotations

import httpx

__all__ = ["Transport"]


class Transport(httpx.AsyncHTTPTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except (AttributeError, OSError) as exc:
            raise httpx.ConnectError(f"connection to {request.url.netloc.decode()} broke while opening: {exc!r}",
                                     request=request) from exc
