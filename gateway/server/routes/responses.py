"""POST /v1/responses over HTTP: JSON, or an SSE stream of Responses events.

Codex sends the whole history on every request, keyed by `prompt_cache_key`: the exact
tokens of the session's previous turn are kept under that key and spliced into the
next prompt (gateway/tokenfix), and the key pins the session to one replica. RL
clients may send `rollout_id` (and `response_mask`) as extra top-level fields: the
call is then recorded in that rollout's trajectory, as over Chat Completions.
The turn is built as over WebSocket (gateway/adapters/responses_turn.py) and run by the
exchange (gateway/pipeline/exchange.py).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.responses_events import Event
from gateway.adapters.responses_turn import from_http
from gateway.core.push import Hold, Sink
from gateway.pipeline import exchange
from gateway.server.http import JSONResponse, model_route, sse_event, sse_response
from gateway.server.routes.stored_responses import run_in_background

__all__ = ["create_response", "sse_sink"]


async def _create(request: Request, raw: bytes) -> Response:
    made = await from_http(request.app.state.runtime, raw, request.app.state.settings)
    if made.parsed.background:
        return await run_in_background(request.app.state.runtime, made)
    if made.parsed.stream:
        async def relay(sink: Sink[bytes]) -> None:
            await exchange.run(made.turn, made.output(sse_sink(sink)))
        return sse_response(relay)
    output = made.output()
    await exchange.run(made.turn, output)
    return JSONResponse(output.response())


create_response = model_route(_create)


def sse_sink(sink: Sink[bytes]) -> Sink[list[Event]]:
    """Responses events as SSE into `sink`: one write for the events of one upstream read."""
    def write(events: list[Event]) -> Hold:
        return sink(sse_event(events[0]) if len(events) == 1 else b"".join([sse_event(event) for event in events]))
    return write
