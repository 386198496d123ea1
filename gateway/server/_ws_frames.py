"""The gateway's uvicorn WebSocket protocol offers each socket a direct text-message writer
(gateway/ws/frames.py says why): what uvicorn's `send` does for a `websocket.send` of text,
minus the ASGI layers, under the same conditions (open, not closing, writable)."""

from __future__ import annotations

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState

from gateway.ws.frames import EXTENSION

__all__ = ["DirectFrames"]


class ProtocolFrames:
    """Writes text messages straight through one connection's websockets state machine."""

    __slots__ = ("_protocol",)

    def __init__(self, protocol: WebSocketsSansIOProtocol) -> None:
        self._protocol = protocol

    def write(self, text: bytes) -> bool:
        protocol = self._protocol
        if (not protocol.writable.is_set() or protocol.disconnected or not protocol.handshake_complete
                or protocol.close_sent or protocol.initial_response is not None):
            return False
        try:
            protocol.conn.send_text(text)
        except InvalidState:
            return False
        protocol.transport.write(b"".join(protocol.conn.data_to_send()))
        return True

    @property
    def paused(self) -> bool:
        return not self._protocol.writable.is_set()

    async def drain(self) -> None:
        await self._protocol.writable.wait()  # set again when the connection is lost


class DirectFrames(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol, offering each socket a `ProtocolFrames` in its scope."""

    def handle_connect(self, event: object) -> None:
        super().handle_connect(event)  # type: ignore[arg-type]
        scope = getattr(self, "scope", None)
        if scope is not None:
            scope.setdefault("extensions", {})[EXTENSION] = ProtocolFrames(self)
