"""WebSocket mode on /v1/responses: one socket, many responses, history kept server-side.

A thin transport shell around the same pipeline as POST /v1/responses (`Turn` +
`response_events`): each `response.create` frame becomes a `ResponsesRequest`, runs on
its `stream_id` lane, and every Responses event goes out as one JSON text frame. The
latest response of each lane is cached with its exact token ids, so a continuation
(`previous_response_id` + only the new items) prompts the model with exactly the tokens
it saw and produced, plus the rendered new items.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketDisconnected, WebSocketState

from gateway.adapters.continuation import CachedResponse, parse_continuation
from gateway.adapters.responses import Event, check_model, failed_events, response_events
from gateway.adapters.responses_events import ResponseWriter
from gateway.adapters.responses_input import ResponsesRequest
from gateway.adapters.rollout_fields import begin_rollout
from gateway.adapters.validation import expect
from gateway.core import logs
from gateway.core.errors import APIError, shutting_down
from gateway.core.ids import new_id
from gateway.core.settings import Settings
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.turn import Turn, TurnRequest
from gateway.server import observe
from gateway.server.admission import Admission
from gateway.sessions.rollouts import Pending
from gateway.tokenfix.state import TokenState
from gateway.ws.cache import ResponseCache
from gateway.ws.errors import (
    connection_limit_reached,
    error_event,
    invalid_json,
    previous_response_not_found,
    processing_error,
)
from gateway.ws.lanes import Lanes
from gateway.ws.request import CreateRequest, frame_stream_id, read_create

log = logging.getLogger(__name__)

# What sending on a socket the client (or we) already closed raises.
_GONE = (WebSocketDisconnect, WebSocketDisconnected)
TRY_AGAIN_LATER = 1013
GOING_AWAY = 1001


async def responses_websocket(websocket: WebSocket) -> None:
    """The route: admit the socket within the server-wide cap, then serve it."""
    state = websocket.app.state
    settings: Settings = state.settings
    await websocket.accept()
    if state.ws_connections >= settings.max_websocket_connections:
        limit = f"{settings.max_websocket_connections} open connections"
        await _send(websocket, error_event(connection_limit_reached(limit)))
        await websocket.close(code=TRY_AGAIN_LATER)
        return
    state.ws_connections += 1
    socket = ResponsesSocket(websocket, state.runtime, settings)
    state.drain.sockets.add(socket)  # on shutdown: finish what runs, then close with 1001
    try:
        await socket.serve()
    finally:
        state.drain.sockets.discard(socket)
        state.ws_connections -= 1


class ResponsesSocket:
    def __init__(self, websocket: WebSocket, runtime: Runtime, settings: Settings) -> None:
        self.websocket = websocket
        self.runtime = runtime
        self.settings = settings
        self.connection_id = new_id("ws")
        self.metrics = websocket.app.state.metrics
        self.cache = ResponseCache()
        self.lanes: Lanes[CreateRequest] = Lanes(self._respond)
        self.close_code = 1000
        self._reader: asyncio.Task | None = None

    @property
    def busy(self) -> bool:
        return self.lanes.busy

    def go_away(self) -> None:
        """The server is shutting down: stop, cancel what still runs, close with 1001."""
        self.close_code = GOING_AWAY
        if self._reader is not None:
            self._reader.cancel()

    async def serve(self) -> None:
        """Read frames until the client leaves or the lifetime ends; then cancel what is in
        flight (closing a turn's event stream aborts its upstream request)."""
        logs.connection_id.set(self.connection_id)  # this task's, and its frame reader's and lanes'
        log.info("websocket %s opened", self.connection_id)
        reader = self._reader = asyncio.create_task(self._read_frames())
        expiry = asyncio.create_task(self._expire())
        try:
            await asyncio.wait({reader, expiry}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            reader.cancel()
            expiry.cancel()
            await self.lanes.close()
            for result in await asyncio.gather(reader, expiry, return_exceptions=True):
                if isinstance(result, Exception) and not isinstance(result, _GONE):
                    log.error("websocket %s failed", self.connection_id, exc_info=result)
            await self._close()
            log.info("websocket %s closed", self.connection_id)

    # -- frames ------------------------------------------------------------------------

    async def _read_frames(self) -> None:
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            await self._on_frame(message.get("text") or message.get("bytes") or b"")

    async def _on_frame(self, data: str | bytes) -> None:
        try:
            frame = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            await self._send_error(invalid_json(str(exc)))
            return
        if not isinstance(frame, dict):
            await self._send_error(invalid_json(f"got a JSON {type(frame).__name__}"))
            return
        try:
            if self.websocket.app.state.drain.draining:
                raise shutting_down()
            request = read_create(frame)
            self.lanes.submit(request.stream_id, request)
        except APIError as exc:
            await self._send_error(exc, frame_stream_id(frame))

    # -- responses ---------------------------------------------------------------------

    async def _respond(self, request: CreateRequest) -> None:
        lane = request.stream_id
        with observe.traced("responses_ws", self.metrics, new_id("req"), request.received):
            try:
                await self._create(request)
            except _GONE:
                raise  # the socket is closing; serve() cancels the rest
            except Exception:
                log.exception("websocket %s: a response failed", self.connection_id)
                self.cache.evict(lane)
                await self._send_error(processing_error(), lane)

    async def _create(self, request: CreateRequest) -> None:
        lane = request.stream_id
        try:
            previous = self._previous(request.body)
            parsed = parse_continuation(request.body, previous)
            check_model(self.runtime, parsed.model)
            rollout = begin_rollout(self.runtime, request.body)
        except APIError as exc:  # nothing ran: the lane's cache stays as it was
            await self._send_error(exc, lane)
            return
        if not request.generate:
            await self._warm_up(parsed, previous, lane)
            return
        admission: Admission = self.websocket.app.state.admission  # the budget HTTP requests share
        try:
            admission.acquire()
        except APIError as exc:  # over the limit: nothing ran
            await self._send_error(exc, lane)
            return
        try:
            await self._generate(parsed, previous, lane, rollout)
        finally:
            admission.release()

    def _previous(self, body: dict[str, Any]) -> CachedResponse | None:
        response_id = expect(body.get("previous_response_id"), str, "previous_response_id")
        if response_id is None:
            return None
        previous = self.cache.find(response_id) or self.runtime.responses.get(response_id)
        if previous is None:
            raise previous_response_not_found(response_id)
        return previous

    def _prefix(self, previous: CachedResponse | None, key: str | None) -> TokenState | None:
        """Exact tokens the prompt may continue: the cached response's, else the session's
        (a client reconnecting after the lifetime resends its full history under the same key)."""
        if previous is not None and previous.tokens is not None:
            return previous.tokens
        return self.runtime.sessions.get(key) if key else None

    async def _generate(self, parsed: ResponsesRequest, previous: CachedResponse | None, lane: str | None,
                        rollout: Pending | None = None) -> None:
        key = parsed.prompt_cache_key
        conversation = parsed.conversation
        prefix = self._prefix(previous, key)
        if rollout is not None:  # an RL rollout: its own exact tokens, logprobs, replica and record
            prefix = previous.tokens if previous and previous.tokens else rollout.prefix or prefix
            if parsed.sampling.logprobs is None:
                parsed.sampling.logprobs = 0
        turn = Turn(self.runtime, TurnRequest(conversation, parsed.sampling, prefix=prefix, generated=parsed.generated,
                                              affinity=rollout.rollout_id if rollout else key or self.connection_id,
                                              check_prompt=rollout.check if rollout else None))
        writer = ResponseWriter(response_id=new_id("resp"), model=parsed.model, echo=parsed.echo)

        def remember(turn: Turn, final: Event) -> None:
            tokens = turn.token_state()
            history = dataclasses.replace(conversation, items=[*conversation.items, *turn.turn_items])
            entry = CachedResponse(writer.response_id, history, tokens)
            self.cache.put(lane, entry)
            if parsed.echo["store"]:
                self.runtime.responses.put(entry)
            if key and tokens is not None:
                self.runtime.sessions.put(key, tokens)
            if rollout and tokens is not None:
                rollout.commit(turn, tokens)

        try:
            await turn.start()
        except APIError as exc:
            self.cache.evict(lane)
            if exc.code == "context_length_exceeded":  # as over SSE: a failed response, not a retryable error
                await self._send_all(failed_events(writer, exc), lane)
            else:
                await self._send_error(exc, lane)
            return
        async with contextlib.aclosing(response_events(turn, writer, parsed, remember)) as batches:
            async for batch in batches:
                for event in batch:
                    if event["type"] == "response.failed":
                        self.cache.evict(lane)
                    await self._send(event, lane)

    async def _warm_up(self, parsed: ResponsesRequest, previous: CachedResponse | None, lane: str | None) -> None:
        """`generate: false`: remember the conversation for the next request, generate nothing.
        The prompt is rendered only to report its size; nothing new was generated, so the
        exact tokens to continue are still the previous response's."""
        conversation = parsed.conversation
        prompt = await asyncio.to_thread(self.runtime.format.render, conversation)
        writer = ResponseWriter(response_id=new_id("resp"), model=parsed.model, echo=parsed.echo)
        usage = {"input_tokens": len(prompt), "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 0,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": len(prompt)}
        self.cache.put(lane, CachedResponse(writer.response_id, conversation, previous.tokens if previous else None))
        for event in [*writer.start(), writer.completed(usage)]:
            await self._send(event, lane)

    # -- lifetime ----------------------------------------------------------------------

    async def _expire(self) -> None:
        lifetime, warning = self.settings.websocket_lifetime, self.settings.websocket_warning
        if 0 <= warning < lifetime:
            await asyncio.sleep(warning)
            await self._send({"type": "connection_expiring", "connection_id": self.connection_id,
                              "expires_in_seconds": lifetime - warning})
            await asyncio.sleep(lifetime - warning)
        else:
            await asyncio.sleep(lifetime)
        await self.lanes.close()  # nothing more of an unfinished response follows the error
        await self._send_error(connection_limit_reached(f"a connection lasts {lifetime:g} seconds"))

    # -- sending -----------------------------------------------------------------------

    async def _send(self, event: Event, stream_id: str | None = None) -> None:
        if stream_id is not None:
            event["stream_id"] = stream_id
        await _send(self.websocket, event)

    async def _send_all(self, batches: AsyncIterator[list[Event]], stream_id: str | None) -> None:
        async for batch in batches:
            for event in batch:
                await self._send(event, stream_id)

    async def _send_error(self, exc: APIError, stream_id: str | None = None) -> None:
        observe.error(exc.status)
        await _send(self.websocket, error_event(exc, stream_id))

    async def _close(self) -> None:
        websocket = self.websocket
        if WebSocketState.DISCONNECTED in (websocket.application_state, websocket.client_state):
            return
        with contextlib.suppress(*_GONE, OSError):
            await websocket.close(code=self.close_code)


async def _send(websocket: WebSocket, event: dict[str, Any]) -> None:
    await websocket.send({"type": "websocket.send", "text": orjson.dumps(event).decode()})
