"""POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API (Claude Code).

The same exchange as the Responses API: the session is Claude Code's (its session id),
whose exact tokens the next prompt continues; thinking signatures carry sealed reasoning.
Errors answer in Anthropic's shape (`{"type": "error", "error": {...}}`: gateway/server/http.py
shapes every error under /v1/messages so). The `x-api-key` header is checked before the route,
by gateway/server/auth.py.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.anthropic.input import MessagesRequest, parse_messages_request
from gateway.adapters.anthropic.output import MessageEvents, message
from gateway.adapters.turns import message_turn
from gateway.adapters.validation import parse_json
from gateway.core.ids import new_id
from gateway.core.push import Sink
from gateway.pipeline import exchange, trace
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.turn import Turn
from gateway.server.http import JSONResponse, model_route, sse_response

__all__ = ["count_tokens", "create_message"]

SESSION_HEADER = "x-claude-code-session-id"
AGENT_HEADER = "x-claude-code-agent-id"  # a subagent's (Claude Code ≥ 2.1.139); the main agent sends none


async def _create(request: Request, raw: bytes) -> Response:
    parsed, turn = await _turn(request, raw)
    message_id = new_id("msg")
    trace.answered_as(message_id)
    if parsed.stream:
        async def relay(sink: Sink[bytes]) -> None:
            await exchange.run(turn, MessageEvents(parsed, message_id, sink))
        return sse_response(relay)
    await exchange.run(turn, exchange.Quiet())
    return JSONResponse(message(turn, parsed, message_id))


async def _count_tokens(request: Request, raw: bytes) -> Response:
    """The length of the prompt POST /v1/messages would send for this body (its session's exact
    tokens spliced in as they would be, images as vLLM expands them), nothing sent."""
    _, turn = await _turn(request, raw, count_only=True)
    return JSONResponse({"input_tokens": await turn.measure()})


async def _turn(request: Request, raw: bytes, count_only: bool = False) -> tuple[MessagesRequest, Turn]:
    """The body's turn (not started), under Claude Code's session (a subagent's own)."""
    runtime: Runtime = request.app.state.runtime
    parsed = parse_messages_request(parse_json(raw), session_header=request.headers.get(SESSION_HEADER),
                                    agent_header=request.headers.get(AGENT_HEADER), count_only=count_only)
    return parsed, await message_turn(runtime, parsed)


create_message = model_route(_create)
count_tokens = model_route(_count_tokens)
