"""GET /v1/responses upgraded: WebSocket mode (gateway/ws), within the server's limits.

The route admits the socket under the server-wide connection cap, registers it with the
drain (on shutdown: finish what runs, then close with 1001), and gives it the request traces
it shares with HTTP. The connection is its handshake's API key's tenant's, for its whole life:
each `response.create` that generates passes the exchange's gate (the server's budget of
requests in flight, then that tenant's limits) as an HTTP request does.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager

from starlette.websockets import WebSocket

from gateway.core.ids import new_id
from gateway.core.settings import Settings
from gateway.pipeline.trace import Trace
from gateway.server import _observe as observe
from gateway.server._metrics import Metrics
from gateway.ws.connection import ResponsesSocket, refuse

__all__ = ["responses_websocket"]


async def responses_websocket(websocket: WebSocket) -> None:
    state = websocket.app.state
    settings: Settings = state.settings
    await websocket.accept()
    if state.ws_connections >= settings.max_websocket_connections:
        await refuse(websocket, settings.max_websocket_connections)
        return
    state.ws_connections += 1
    traced = functools.partial(_traced, state.metrics, websocket.scope["headers"])
    socket = ResponsesSocket(websocket, state.runtime, settings, traced=traced,
                             draining=lambda: state.drain.draining)
    state.drain.sockets.add(socket)
    try:
        await socket.serve()
    finally:
        state.drain.sockets.discard(socket)
        state.ws_connections -= 1


def _traced(metrics: Metrics, headers: list[tuple[bytes, bytes]], received: float) -> AbstractContextManager[Trace]:
    """One `response.create`'s trace, counted as the `responses_ws` API; its span continues the
    handshake's `traceparent`, so each response on a socket is its own span in the caller's trace."""
    return observe.traced("responses_ws", metrics, new_id("req"), received, span_name="response.create",
                          headers=headers)
