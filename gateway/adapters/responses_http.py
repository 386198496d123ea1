"""POST /v1/responses over HTTP: JSON, or an SSE stream of Responses events.

Codex sends the whole history on every request, keyed by `prompt_cache_key`: the exact
tokens of the session's previous turn are kept under that key and spliced into the
next prompt (gateway/tokenfix), and the key pins the session to one replica. RL
clients may send `rollout_id` (and `response_mask`) as extra top-level fields: the
call is then recorded in that rollout's trajectory, as over Chat Completions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.continuation import CachedResponse, parse_continuation
from gateway.adapters.resent import parse_resent, resent_prefix
from gateway.adapters.responses import Event, check_model, failed_events, response_events
from gateway.adapters.responses_events import ResponseWriter
from gateway.adapters.rollout_fields import begin_rollout
from gateway.adapters.validation import expect
from gateway.core.errors import APIError, invalid_request
from gateway.core.ids import new_id
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.turn import Turn, TurnRequest
from gateway.server.http import JSONResponse, parse_json, read_body, sse_event, sse_response


async def create_response(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    raw = await read_body(request, request.app.state.settings.max_body_bytes)
    # A full history sent again under its prompt_cache_key: only what follows the covered part is parsed.
    resent = parse_resent(raw, runtime.sessions, runtime.format.turn_terminators)
    if resent is not None:
        body, previous, rollout, parsed = None, None, None, resent.parsed
    else:
        body = parse_json(raw)
        previous = _stored(runtime, body)
        parsed = parse_continuation(body, previous)
        rollout = begin_rollout(runtime, body)
    check_model(runtime, parsed.model)
    key = parsed.prompt_cache_key
    prefix = previous.tokens if previous and previous.tokens else (rollout.prefix if rollout else None) or (
        resent.state if resent else runtime.sessions.get(key) if key else None)
    conversation = parsed.conversation
    if rollout and parsed.sampling.logprobs is None:
        parsed.sampling.logprobs = 0  # trajectories carry the sampled tokens' logprobs
    turn = Turn(runtime, TurnRequest(conversation, parsed.sampling, affinity=rollout.rollout_id if rollout else key,
                                     prefix=prefix, generated=parsed.generated,
                                     covered=resent.covered if resent else None,
                                     check_prompt=rollout.check if rollout else None))
    writer = ResponseWriter(response_id=new_id("resp"), model=parsed.model, echo=parsed.echo)

    def remember(turn: Turn, final: Event) -> None:
        state = turn.token_state()
        if key and state is not None:
            if resent is not None:
                state.resent = resent.prefix
            elif body is not None and previous is None and rollout is None:
                state.resent = resent_prefix(raw, body, parsed)
            runtime.sessions.put(key, state)
        if rollout and state is not None:
            rollout.commit(turn, state)
        if parsed.echo["store"]:
            history = dataclasses.replace(conversation, items=[*conversation.items, *turn.turn_items])
            runtime.responses.put(CachedResponse(writer.response_id, history, state))

    try:
        await turn.start()
    except APIError as exc:
        if not parsed.stream or exc.code != "context_length_exceeded":
            raise  # an HTTP error: Codex retries 429/5xx and fails at once on 400
        return sse_response(_sse(failed_events(writer, exc)))
    events = response_events(turn, writer, parsed, remember)
    if parsed.stream:
        return sse_response(_sse(events))
    final: Event = {}
    async for batch in events:
        final = batch[-1]
    if final["type"] == "response.failed":
        error = final["response"]["error"]
        raise APIError(error["message"], status=502, type="server_error", code=error["code"])
    return JSONResponse(final["response"])


def _stored(runtime: Runtime, body: object) -> CachedResponse | None:
    """The stored response `previous_response_id` names (a `store: true` response)."""
    response_id = expect(body.get("previous_response_id"), str, "previous_response_id") if isinstance(
        body, dict) else None
    if response_id is None:
        return None
    previous = runtime.responses.get(response_id)
    if previous is None:
        raise invalid_request(f"Previous response with id '{response_id}' not found: only responses created "
                              f"with store=true on this gateway can be continued.", param="previous_response_id",
                              code="previous_response_not_found")
    return previous


async def _sse(batches: AsyncIterator[list[Event]]) -> AsyncIterator[bytes]:
    """One body chunk per batch of events: one write to the client for many tokens."""
    async for batch in batches:
        yield b"".join([sse_event(event) for event in batch])
