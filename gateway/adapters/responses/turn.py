"""A `response.create` as a turn: the one builder POST /v1/responses and WebSocket mode share.

The body names where the turn's exact earlier tokens are: a full history resent under its
`prompt_cache_key` (recognised from the raw bytes, over HTTP), a `conversation`, the response
`previous_response_id` names (the socket's latest, else a `store: true` one), a rollout. The
builder reads the body; the exchange looks up what it names and prepares the turn
(gateway/pipeline/exchange.py `prepare_built`; gateway/pipeline/session.py chooses among the
sources), so a transport makes one call for the turn. The transports differ only in what they
pass: HTTP its raw body, a socket its parsed frame, cache and lane.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from gateway.adapters.request_schema import ResponsesBody, body_field
from gateway.adapters.responses._continuation import parse_continuation, parse_in_conversation
from gateway.adapters.responses._output import CompactionEvents, ResponseEvents, new_writer, plan_hosted
from gateway.adapters.responses.conversation_items import conversation_id
from gateway.adapters.responses.events import Event, ResponseWriter
from gateway.adapters.responses.input import ResponsesRequest, parse_request
from gateway.adapters.responses.resent import Resent, parse_resent, resent_prefix, session_key
from gateway.adapters.rollout_fields import rollout_call
from gateway.adapters.validation import check_model, parse_json
from gateway.core.errors import invalid_request
from gateway.core.ids import new_id
from gateway.core.push import Sink
from gateway.core.settings import Settings
from gateway.pipeline import exchange
from gateway.pipeline.request import Found, Lane, Named, Recognised, RolloutCall, TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.steering import Steering
from gateway.pipeline.turn import Turn
from gateway.store.responses import ResponseCache
from gateway.store.sessions import Session

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
    return await _made(_Create(runtime, settings, raw=raw))


async def from_socket(runtime: Runtime, body: dict[str, Any], settings: Settings, *, cache: ResponseCache,
                      stream_id: str | None, connection_id: str, steering: Steering | None = None) -> ResponseTurn:
    """The turn of a WebSocket `response.create` on lane `stream_id`: it becomes the lane's latest
    response, and the connection's turns share a replica; `steering`: its switch for `response.steer`."""
    socket = {"lane": Lane(cache, stream_id), "connection_id": connection_id, "steering": steering}
    return await _made(_Create(runtime, settings, body=body, socket=socket))


async def _made(create: _Create) -> ResponseTurn:
    turn = await exchange.prepare_built(create.runtime, create)
    assert create.parsed is not None and create.writer is not None
    return ResponseTurn(turn, create.writer, create.parsed)


class _Create:
    """One `response.create` body as the exchange's `Builder` (gateway/pipeline/request.py): over
    HTTP its raw bytes (a whole history resent may be read from its new bytes alone), over a
    socket its parsed frame and the socket's own sources (`socket`: its lane, connection, steering)."""

    def __init__(self, runtime: Runtime, settings: Settings, *, raw: bytes | None = None,
                 body: dict[str, Any] | None = None, socket: dict[str, Any] | None = None) -> None:
        self.runtime, self.settings = runtime, settings
        self._raw, self._body, self._socket = raw, body, socket
        # a whole history again: only what follows the covered part is parsed (never over a socket)
        self.session_key = session_key(raw) if raw is not None else None
        self._resent: Resent | None = None
        self.parsed: ResponsesRequest | None = None  # once `request` read it…
        self.writer: ResponseWriter | None = None  # …and made the response's writer

    def resent(self, found: Session) -> bool:
        assert self._raw is not None and self.session_key is not None
        self._resent = parse_resent(self._raw, self.session_key, found, self.runtime.format.turn_terminators)
        return self._resent is not None  # never one with MCP tools (gateway/adapters/responses/resent.py)

    def named(self) -> Named:
        if self._body is None:
            assert self._raw is not None
            body = parse_json(self._raw)
            if not isinstance(body, dict):
                parse_request(body)  # its 400
                raise TypeError("parse_request takes only an object")
            self._body = body
        in_conversation = conversation_id(self._body)
        if in_conversation is not None:
            return Named(conversation_id=in_conversation)
        previous = body_field(ResponsesBody, "previous_response_id", self._body.get("previous_response_id"))
        return Named(previous_response_id=previous, cache=self._socket["lane"].cache if self._socket is not None else None)

    async def request(self, found: Found) -> tuple[TurnRequest, RolloutCall | None]:
        if found.resent is not None:
            assert self._resent is not None
            resent = self._resent
            self.parsed = resent.parsed
            return await self._checked(_turn_request(resent.parsed, recognised=Recognised(
                resent.state, resent.covered, resent.prefix))), None
        body = self._body
        assert body is not None
        parsed, sources = self._continued(body, found)
        self.parsed = parsed
        rollout = rollout_call(body)
        if self._socket is not None:
            request = _turn_request(parsed, **self._socket, **sources)
        else:
            index = partial(resent_prefix, self._raw, body, parsed) if not any(sources.values()) and rollout is None \
                else None
            request = _turn_request(parsed, resent=index, **sources)
        return await self._checked(request, body), rollout

    def _continued(self, body: dict[str, Any], found: Found) -> tuple[ResponsesRequest, dict[str, Any]]:
        """The parsed body, and what it continues: a conversation (`conversation`) or a response
        (`previous_response_id`: the connection's latest of any lane, else a `store: true` one)."""
        if found.conversation is not None:
            parsed, place = parse_in_conversation(body, found.conversation)
            return parsed, {"in_conversation": place}
        response_id = body.get("previous_response_id")
        if response_id is not None and found.previous is None:
            where = " on this connection; send the full input instead" if self._socket is not None else (
                ": only responses created with store=true on this gateway can be continued")
            raise invalid_request(f"Previous response with id '{response_id}' not found{where}.",
                                  param="previous_response_id", code="previous_response_not_found")
        return parse_continuation(body, found.previous), {"previous": found.previous}

    async def _checked(self, request: TurnRequest, body: dict[str, Any] | None = None) -> TurnRequest:
        """`request`, once its model is known and its remote MCP tools admitted and listed; its
        response's writer made."""
        assert self.parsed is not None and request.response_id is not None
        adapter = check_model(self.runtime.model_name, self.parsed.model, self.runtime.pool.adapters)
        if body is not None:
            await plan_hosted(self.parsed, body, self.settings)
        self.writer = new_writer(self.runtime, request.response_id, self.parsed, self.settings.responses_spec)
        return replace(request, adapter=adapter)


def _turn_request(parsed: ResponsesRequest, **sources: Any) -> TurnRequest:
    return TurnRequest(parsed.conversation, parsed.sampling, response_id=new_id("resp"),
                       session_key=parsed.prompt_cache_key, generated=parsed.generated, store=parsed.store,
                       spans=parsed.text_logprobs, truncate=parsed.truncate, **sources)
