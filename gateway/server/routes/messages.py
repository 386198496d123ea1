"""POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API (Claude Code).

The same turn pipeline as the Responses API: the session is Claude Code's (its session id),
whose exact tokens the next prompt continues; thinking signatures carry sealed reasoning.
Errors answer in Anthropic's shape (`{"type": "error", "error": {...}}`). The `x-api-key`
header is checked before the route, by gateway/server/auth.py.
"""

from __future__ import annotations

import asyncio
from functools import partial

from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.anthropic_input import parse_messages_request
from gateway.adapters.anthropic_output import error_body, message, stream
from gateway.adapters.responses import check_model
from gateway.core.errors import APIError
from gateway.core.ids import new_id
from gateway.pipeline import session, trace
from gateway.pipeline.request import TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.server.http import JSONResponse, read_json, sse_response

SESSION_HEADER = "x-claude-code-session-id"


async def create_message(request: Request) -> Response:
    try:
        return await _create(request)
    except APIError as exc:
        return _error(exc)


async def count_tokens(request: Request) -> Response:
    """The prompt's size as the gateway would render it (tools, system and all)."""
    try:
        runtime: Runtime = request.app.state.runtime
        body = await read_json(request, request.app.state.settings.max_body_bytes)
        parsed = parse_messages_request(body, count_only=True)
        check_model(runtime, parsed.model)
        ids = await asyncio.to_thread(runtime.format.render, parsed.conversation)
        return JSONResponse({"input_tokens": len(ids)})
    except APIError as exc:
        return _error(exc)


async def _create(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    body = await read_json(request, request.app.state.settings.max_body_bytes)
    parsed = parse_messages_request(body, session_header=request.headers.get(SESSION_HEADER))
    check_model(runtime, parsed.model)
    turn = await session.prepare(runtime, TurnRequest(parsed.conversation, parsed.sampling, cache_key=parsed.session,
                                                      generated=parsed.generated, max_tokens_cap=True))
    await turn.start()
    message_id = new_id("msg")
    if parsed.stream:
        return sse_response(partial(stream, turn, parsed, message_id), cleanup=turn.aclose)
    try:
        async for _ in turn.events():
            pass
    except APIError:
        session.forget(turn.request)
        raise
    if turn.record.finished:
        await session.commit(turn)
    return JSONResponse(message(turn, parsed, message_id))


def _error(exc: APIError) -> Response:
    trace.error(exc)
    headers = exc.headers()
    return JSONResponse(error_body(exc), status_code=exc.status, headers=headers)
