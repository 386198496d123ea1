"""Writing a WebSocket's Responses events without an ASGI `send` per token.

At engine pace every token is its own WebSocket message, and an ASGI `send` of it passes
Starlette's WebSocket checks and each middleware's send wrapper down to uvicorn's. The
gateway's uvicorn WebSocket protocol (gateway/server/_ws_frames.py) offers a synchronous
writer of text messages as an ASGI scope extension; `frame_writer(scope)` returns it, or None
under another server, where events go through `send` as usual. A middleware that must see the
messages wraps the writer in the scope it passes on, or removes it (tests/codex/harness.py).
"""

from __future__ import annotations

from typing import Protocol

from starlette.types import Scope

__all__ = ["EXTENSION", "frame_writer"]

EXTENSION = "gateway.frame_writer"


class FrameWriter(Protocol):
    def write(self, text: bytes) -> bool:
        """Send `text` (UTF-8 JSON) as one text message; False (nothing written) where the ASGI
        `send` must do it (not open, closing, or the client's buffer already full)."""

    @property
    def paused(self) -> bool:
        """The client's buffer is full: `drain()` before writing more."""

    async def drain(self) -> None: ...


def frame_writer(scope: Scope) -> FrameWriter | None:
    return scope.get("extensions", {}).get(EXTENSION)
