"""POST /v1/responses over HTTP: JSON, or an SSE stream of Responses events.

Codex sends the whole history on every request, keyed by `prompt_cache_key`: the exact
tokens of the session's previous turn are kept under that key and spliced into the
next prompt (gateway/tokenfix), and the key pins the session to one replica. RL
clients may send `rollout_id` (and `response_mask`) as extra top-level fields: the
call is then recorded in that rollout's trajectory, as over Chat Completions.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.continuation import parse_continuation, parse_in_conversation
from gateway.adapters.resent import parse_resent, resent_prefix
from gateway.adapters.responses import (
    Event,
    check_model,
    failed_events,
    new_writer,
    relay_response,
    response_events,
)
from gateway.adapters.responses_events import ResponseWriter
from gateway.adapters.responses_input import ResponsesRequest
from gateway.adapters.rollout_fields import begin_rollout
from gateway.adapters.validation import expect
from gateway.core.errors import APIError, invalid_request
from gateway.core.ids import new_id
from gateway.pipeline import session
from gateway.pipeline.request import Recognised, TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.turn import Turn
from gateway.server.admission import Admission
from gateway.server.http import (
    Emit,
    JSONResponse,
    cancelled_on_disconnect,
    parse_json,
    read_body,
    sse_event,
    sse_response,
)
from gateway.server.routes.stored_responses import run_in_background
from gateway.sessions.responses import CachedResponse


async def create_response(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    settings = request.app.state.settings
    raw = await read_body(request, settings.max_body_bytes, settings.request_body_timeout)
    async with cancelled_on_disconnect(request):
        return await _respond(runtime, raw, settings.responses_spec, request.app.state.admission)


async def _respond(runtime: Runtime, raw: bytes, spec: str, admission: Admission) -> Response:
    turn, writer, parsed = await prepared(runtime, raw, spec)
    if parsed.background:
        return await run_in_background(runtime, turn, writer, parsed, admission)
    try:
        await turn.start()
        if parsed.stream:
            return sse_response(partial(_relay, turn, writer, parsed), cleanup=turn.aclose)
        response = await final_response(turn, writer, parsed)
    except APIError as exc:
        await turn.aclose()
        if not parsed.stream or exc.code != "context_length_exceeded":
            raise  # an HTTP error: Codex retries 429/5xx and fails at once on 400
        return sse_response(_sse(failed_events(writer, exc)))
    except BaseException:
        await turn.aclose()
        raise
    await turn.aclose()
    return JSONResponse(response)


async def prepared(runtime: Runtime, raw: bytes, spec: str) -> tuple[Turn, ResponseWriter, ResponsesRequest]:
    """The turn a POST /v1/responses body asks for (not started), its writer and the parsed body."""
    # A full history sent again under its prompt_cache_key: only what follows the covered part is parsed.
    resent = await parse_resent(raw, runtime)
    if resent is not None:
        parsed = resent.parsed
        turn_request = _turn_request(parsed, recognised=Recognised(resent.state, resent.covered, resent.prefix))
    else:
        body = parse_json(raw)
        in_conversation = await parse_in_conversation(runtime, body) if isinstance(body, dict) else None
        if in_conversation is not None:
            parsed, place = in_conversation
            rollout = await begin_rollout(runtime, body)
            turn_request = _turn_request(parsed, in_conversation=place, rollout=rollout)
        else:
            previous = await _stored(runtime, body)
            parsed = parse_continuation(body, previous)
            rollout = await begin_rollout(runtime, body)
            index = partial(resent_prefix, raw, body, parsed) if previous is None and rollout is None else None
            turn_request = _turn_request(parsed, previous=previous, rollout=rollout, resent=index)
    check_model(runtime, parsed.model)
    turn = await session.prepare(runtime, turn_request)
    return turn, new_writer(runtime, turn_request.response_id, parsed, spec), parsed


async def final_response(turn: Turn, writer: ResponseWriter, parsed: ResponsesRequest) -> dict[str, Any]:
    """The Response object of a started turn, generated to its end; a failed one is an APIError."""
    final: Event = {}
    async with contextlib.aclosing(response_events(turn, writer, parsed)) as events:
        async for batch in events:
            final = batch[-1]
    if final["type"] == "response.failed":
        code, message = writer.failure or ("server_error", final["response"]["error"]["message"])
        status = _FAILED_STATUS.get(code, 502)
        raise APIError(message, status=status, type="server_error", code=code)
    return final["response"]


# A generation that failed, as a non-streaming answer's status (the failure's own code kept).
_FAILED_STATUS = {"upstream_timeout": 504, "server_shutting_down": 503}


def _turn_request(parsed: ResponsesRequest, **sources: Any) -> TurnRequest:
    return TurnRequest(parsed.conversation, parsed.sampling, response_id=new_id("resp"),
                       cache_key=parsed.prompt_cache_key, generated=parsed.generated, store=parsed.store,
                       spans=parsed.text_logprobs, truncate=parsed.truncate, **sources)


async def _stored(runtime: Runtime, body: object) -> CachedResponse | None:
    """The stored response `previous_response_id` names (a `store: true` response)."""
    response_id = expect(body.get("previous_response_id"), str, "previous_response_id") if isinstance(
        body, dict) else None
    if response_id is None:
        return None
    previous = await session.previous_response(runtime, response_id)
    if previous is None:
        raise invalid_request(f"Previous response with id '{response_id}' not found: only responses created "
                              f"with store=true on this gateway can be continued.", param="previous_response_id",
                              code="previous_response_not_found")
    return previous


async def _relay(turn: Turn, writer: ResponseWriter, parsed: ResponsesRequest, emit: Emit) -> None:
    """The response's events as SSE, one write per upstream read (gateway/adapters/responses.py)."""
    await relay_response(turn, writer, parsed, lambda events: emit(sse_events(events)))


def sse_events(events: list[Event]) -> bytes:
    return sse_event(events[0]) if len(events) == 1 else b"".join([sse_event(event) for event in events])


async def _sse(batches: AsyncIterator[list[Event]]) -> AsyncIterator[bytes]:
    """One body chunk per batch of events: one write to the client for many tokens."""
    async with contextlib.aclosing(batches):
        async for batch in batches:
            yield sse_events(batch)
