"""A `response.create` as a turn: the one builder POST /v1/responses and WebSocket mode share.

The body names where the turn's exact earlier tokens are (the exchange prepares the turn:
gateway/pipeline/session.py chooses among them): a full history resent under its `prompt_cache_key` (recognised from the raw
bytes, over HTTP), a `conversation`, the response `previous_response_id` names (the socket's
latest, else a `store: true` one), a rollout. The transports differ only in what they pass: HTTP its raw
body, a socket its parsed frame, cache and lane.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from gateway.adapters.continuation import parse_continuation, parse_in_conversation
from gateway.adapters.request_schema import ResponsesBody, body_field
from gateway.adapters.resent import Resent, parse_resent, resent_prefix, session_key
from gateway.adapters.responses import CompactionEvents, ResponseEvents, new_writer, plan_hosted
from gateway.adapters.responses_events import Event, ResponseWriter
from gateway.adapters.responses_input import ResponsesRequest, parse_request
from gateway.adapters.rollout_fields import rollout_call
from gateway.adapters.validation import check_model, parse_json
from gateway.core.errors import invalid_request
from gateway.core.ids import new_id
from gateway.core.push import Sink
from gateway.core.settings import Settings
from gateway.pipeline import exchange, session
from gateway.pipeline.request import Lane, Recognised, RolloutCall, TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.steering import Steering
from gateway.pipeline.turn import Turn
from gateway.store.responses import CachedResponse, ResponseCache

__all__ = ["ResponseTurn", "from_http", "from_socket"]


@dataclass(frozen=True, slots=True)
class ResponseTurn:
    """What a `response.create` asked for: its turn (not started), its writer, the parsed body."""

    turn: Turn
    writer: ResponseWriter
    parsed: ResponsesRequest

    def output(self, sink: Sink[list[Event]] | None = None) -> ResponseEvents:
        """The exchange's writer for it: its events handed to `sink`, or kept for a JSON answer."""
        kind = CompactionEvents if self.parsed.compact else ResponseEvents
        return kind(self.writer, self.parsed, sink)


async def from_http(runtime: Runtime, raw: bytes, settings: Settings) -> ResponseTurn:
    """The turn of a POST /v1/responses body."""
    resent = await _resent(runtime, raw)  # a whole history again: only what follows the covered part is parsed
    if resent is not None:  # never one with MCP tools (gateway/adapters/resent.py)
        parsed = resent.parsed
        request = _turn_request(parsed, recognised=Recognised(resent.state, resent.covered, resent.prefix))
        return await _prepared(runtime, request, parsed, settings, None)
    body = parse_json(raw)
    if not isinstance(body, dict):
        parse_request(body)  # its 400
        raise TypeError("parse_request takes only an object")
    parsed, sources = await _continued(runtime, body, None)
    rollout = rollout_call(body)
    index = partial(resent_prefix, raw, body, parsed) if not any(sources.values()) and rollout is None else None
    request = _turn_request(parsed, resent=index, **sources)
    return await _prepared(runtime, request, parsed, settings, rollout, body)


async def from_socket(runtime: Runtime, body: dict[str, Any], settings: Settings, *, cache: ResponseCache,
                      stream_id: str | None, connection_id: str, steering: Steering | None = None) -> ResponseTurn:
    """The turn of a WebSocket `response.create` on lane `stream_id`: it becomes the lane's latest
    response, and the connection's turns share a replica; `steering`: its switch for `response.steer`."""
    parsed, sources = await _continued(runtime, body, cache)
    request = _turn_request(parsed, lane=Lane(cache, stream_id), connection_id=connection_id, steering=steering,
                            **sources)
    return await _prepared(runtime, request, parsed, settings, rollout_call(body), body)


async def _prepared(runtime: Runtime, request: TurnRequest, parsed: ResponsesRequest, settings: Settings,
                    rollout: RolloutCall | None, body: dict[str, Any] | None = None) -> ResponseTurn:
    """The turn, once its model is known and its remote MCP tools admitted and listed, as the
    exchange prepares it."""
    adapter = check_model(runtime.model_name, parsed.model, runtime.pool.adapters)
    if body is not None:
        await plan_hosted(parsed, body, settings)
    writer = new_writer(runtime, request.response_id or new_id("resp"), parsed, settings.responses_spec)
    return ResponseTurn(await exchange.prepare(runtime, replace(request, adapter=adapter), rollout), writer, parsed)


def _turn_request(parsed: ResponsesRequest, **sources: Any) -> TurnRequest:
    return TurnRequest(parsed.conversation, parsed.sampling, response_id=new_id("resp"),
                       session_key=parsed.prompt_cache_key, generated=parsed.generated, store=parsed.store,
                       spans=parsed.text_logprobs, truncate=parsed.truncate, **sources)


async def _resent(runtime: Runtime, raw: bytes) -> Resent | None:
    """The body read as continuing its session from the bytes it shares with the one before
    (gateway/adapters/resent.py), or None."""
    key = session_key(raw)
    found = await session.recall(runtime, key, count=False) if key is not None else None
    if found is None:
        return None
    resent = parse_resent(raw, key, found, runtime.format.turn_terminators)
    # `found` is still the session under `key` (nothing was awaited since): counted as a hit
    return resent if resent is not None and session.confirm(runtime, key, found) else None


async def _continued(runtime: Runtime, body: dict[str, Any], cache: ResponseCache | None
                     ) -> tuple[ResponsesRequest, dict[str, Any]]:
    """The parsed body, and what it continues: a conversation (`conversation`) or a response
    (`previous_response_id`)."""
    in_conversation = await parse_in_conversation(runtime, body)
    if in_conversation is not None:
        parsed, place = in_conversation
        return parsed, {"in_conversation": place}
    previous = await _previous(runtime, body, cache)
    return parse_continuation(body, previous), {"previous": previous}


async def _previous(runtime: Runtime, body: dict[str, Any], cache: ResponseCache | None) -> CachedResponse | None:
    """The response `previous_response_id` names: the connection's latest of any lane, else a
    `store: true` one."""
    response_id = body_field(ResponsesBody, "previous_response_id", body.get("previous_response_id"))
    if response_id is None:
        return None
    previous = await session.previous_response(runtime, response_id, cache)
    if previous is None:
        where = " on this connection; send the full input instead" if cache is not None else (
            ": only responses created with store=true on this gateway can be continued")
        raise invalid_request(f"Previous response with id '{response_id}' not found{where}.",
                              param="previous_response_id", code="previous_response_not_found")
    return previous
