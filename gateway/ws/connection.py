"""WebSocket mode on /v1/responses: one socket, many responses, history kept server-side.

A thin transport shell around the same exchange as POST /v1/responses: each
`response.create` frame becomes a turn (gateway/adapters/responses/turn.py, the builder HTTP
uses too), runs on its `stream_id` lane through gateway/pipeline/exchange.py, and every
Responses event goes out as one JSON text frame. The
latest response of each lane is cached with its exact token ids, so a continuation
(`previous_response_id` + only the new items) prompts the model with exactly the tokens
it saw and produced, plus the rendered new items. A `response.steer` stops a running
response at its exact ids and runs its successor as such a continuation (gateway/ws/_steer.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketDisconnected, WebSocketState

from gateway.adapters.responses.events import Event
from gateway.adapters.responses.turn import ResponseTurn, from_socket
from gateway.core import logs
from gateway.core.errors import APIError, shutting_down
from gateway.core.ids import new_id
from gateway.core.push import Hold, Sink
from gateway.core.settings import Settings
from gateway.pipeline import exchange, trace
from gateway.pipeline.request import Lane
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.steering import Steering
from gateway.store.responses import ResponseCache
from gateway.ws._lanes import Lanes
from gateway.ws._steer import (
    MAX_QUEUED,
    Steerable,
    SteerRefused,
    accepted,
    failed,
    pending,
    read_steer,
    successor_body,
    waiting_on,
    with_pending,
)
from gateway.ws._turn_state import metadata_event
from gateway.ws.error_events import connection_limit_reached, error_event, invalid_json, processing_error
from gateway.ws.frames import frame_writer
from gateway.ws.request import CreateRequest, frame_stream_id, read_create

__all__ = ["ResponsesSocket", "refuse"]

log = logging.getLogger(__name__)

# What sending on a socket the client (or we) already closed raises.
_GONE = (WebSocketDisconnect, WebSocketDisconnected)
TRY_AGAIN_LATER = 1013
GOING_AWAY = 1001
POLICY_VIOLATION = 1008


class ResponsesSocket:
    def __init__(self, websocket: WebSocket, runtime: Runtime, settings: Settings, *,
                 traced: Callable[[float], AbstractContextManager[object]], draining: Callable[[], bool]) -> None:
        """`traced(received)`: the request trace one `response.create` runs in; `draining()`: the
        server is shutting down and takes no new responses."""
        self.websocket = websocket
        self.runtime = runtime
        self.settings = settings
        self.traced = traced
        self.draining = draining
        self.connection_id = new_id("ws")
        self.cache = ResponseCache()
        self.lanes: Lanes[CreateRequest] = Lanes(self._respond)
        self.close_code = 1000
        self._reader: asyncio.Task | None = None
        self._n_sending = 0  # sends waiting on the client's socket (one per lane at most)
        self._waiting_since = 0.0  # loop time of the last send that completed, or of the first that waited
        self._steerable: dict[str, Steerable] = {}  # responses generating now, by id
        self._pending: dict[str, list[tuple[str, Any]]] = {}  # steers waiting for a response's tool outputs

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
        stalled = asyncio.create_task(self._watch_sends())
        try:
            await asyncio.wait({reader, expiry, stalled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, expiry, stalled):
                task.cancel()
            await self.lanes.close()
            for result in await asyncio.gather(reader, expiry, stalled, return_exceptions=True):
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
        if frame.get("type") == "response.steer":
            await self._steer(frame)
            return
        try:
            if self.draining():
                raise shutting_down()
            request = read_create(frame)
            if (steers := self._pending.pop(request.body.get("previous_response_id"), None)) is not None:
                request.body = with_pending(request.body, steers)
            self.lanes.submit(request.stream_id, request)
        except APIError as exc:
            await self._send_error(exc, frame_stream_id(frame))

    async def _steer(self, frame: dict[str, Any]) -> None:
        """Accept a steer for a response generating now and stop it at its exact ids (its successor
        follows in `_respond`), or answer `response.steer.failed`."""
        response_id, steer_input = frame.get("previous_response_id"), frame.get("input")
        target = self._steerable.get(response_id) if isinstance(response_id, str) else None
        try:
            read_steer(frame)
            if target is None:
                raise self._not_steerable(response_id)
            if "conversation" in target.body or target.body.get("context_management"):
                raise SteerRefused("steering_not_supported", "Responses bound to a conversation or using "
                                   "automatic compaction do not support steering.")
            if len(target.steers) >= MAX_QUEUED:
                raise SteerRefused("too_many_pending_steers", f"Response {response_id!r} already holds "
                                   f"{MAX_QUEUED} steers; wait for its successor.")
        except SteerRefused as refused:
            lane = target.stream_id if target is not None else None
            await self._send(failed(refused, response_id, steer_input, target=target), lane)
            return
        steer_id = new_id("steer")
        target.steers.append((steer_id, steer_input))
        await self._send(accepted(target, steer_id), target.stream_id)
        target.steering.request()

    def _not_steerable(self, response_id: str) -> SteerRefused:
        if self.cache.find(response_id) is not None:
            return SteerRefused("response_already_completed", f"Response {response_id!r} has completed and takes "
                                "no steering input; continue it with response.create.")
        return SteerRefused("response_not_found", f"No response with id {response_id!r} is in progress on this "
                            "connection.")

    # -- responses ---------------------------------------------------------------------

    async def _respond(self, request: CreateRequest) -> None:
        lane = request.stream_id
        steered: Steerable | None = None  # the response a successor follows, once steered
        while True:
            with self.traced(request.received):
                try:
                    steered = await self._create(request, steered)
                except _GONE:
                    return  # the socket is closing (serve() cancels the rest); raised, it went unretrieved
                except Exception:
                    log.exception("websocket %s: a response failed", self.connection_id)
                    exchange.forget(Lane(self.cache, lane))  # nothing may continue a broken turn
                    await self._send_error(processing_error(), lane)
                    return
            if steered is None or not await self._follows(steered):
                return
            request = CreateRequest(successor_body(steered), lane, True)

    async def _create(self, request: CreateRequest, steered: Steerable | None = None) -> Steerable | None:
        """Run one response (`steered`: the one it is the successor of); the response, if steers
        came while it ran."""
        lane = request.stream_id
        steering = Steering()
        try:
            made = await from_socket(self.runtime, request.body, self.settings, cache=self.cache,
                                     stream_id=lane, connection_id=self.connection_id, steering=steering)
        except APIError as exc:  # a failed continuation: nothing may continue the lane's response (the spec's rule)
            exchange.forget(Lane(self.cache, lane))
            if steered is None:
                await self._send_error(exc, lane)
            for steer_id, steer_input in steered.steers if steered is not None else ():
                refused = SteerRefused("successor_creation_failed", exc.message)
                await self._send(failed(refused, steered.writer.response_id, steer_input, steer_id=steer_id,
                                        target=steered), lane)
            return None
        if steered is None and (turn_state := metadata_event(request.body)) is not None:  # Codex's: first
            await self._send(turn_state, lane)
        if not request.generate:
            await self._warm_up(made, lane)
            return None
        target = self._steerable[made.writer.response_id] = Steerable(request.body, lane, made.writer, steering)
        try:
            await exchange.run(made.turn, made.output(self._sink(lane)))
        except APIError as exc:  # refused before it started (over a budget; the lane's response is forgotten)
            await self._send_error(exc, lane)
        finally:
            del self._steerable[made.writer.response_id]
        return target if target.steers else None

    async def _follows(self, steered: Steerable) -> bool:
        """Whether a successor follows the steered response now: not when it failed (its steers
        fail) or ended with calls of the client's tools (they wait for its outputs)."""
        response_id, lane = steered.writer.response_id, steered.stream_id
        if self.cache.find(response_id) is None:  # failed, or refused: nothing to continue
            refused = SteerRefused("successor_creation_failed", f"Response {response_id!r} did not end in a state "
                                   "a successor can continue.")
            for steer_id, steer_input in steered.steers:
                await self._send(failed(refused, response_id, steer_input, steer_id=steer_id, target=steered), lane)
            return False
        if required := waiting_on(steered):
            self._pending[response_id] = steered.steers
            if len(self._pending) > MAX_QUEUED:  # a client that never continues them holds only the latest
                del self._pending[next(iter(self._pending))]
            for steer_id, _ in steered.steers:
                await self._send(pending(steered, steer_id, required), lane)
            return False
        return True

    async def _warm_up(self, made: ResponseTurn, lane: str | None) -> None:
        """`generate: false`: remember the conversation for the next request, generate nothing."""
        prompt_tokens = await exchange.warm_up(made.turn)
        usage = {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 0,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt_tokens}
        for event in [*made.writer.start(), made.writer.completed(usage)]:
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

    def _sink(self, lane: str | None) -> Sink[list[Event]]:
        """A response's events as text messages, written at once from the upstream read that made
        them where the server allows it (gateway/ws/frames.py), else sent in order; returns what
        to wait for before more (a client whose buffer is full)."""
        frames = frame_writer(self.websocket.scope)

        def sink(events: list[Event]) -> Hold:
            for i, event in enumerate(events):
                if frames is None or not frames.write(orjson.dumps(_on_lane(event, lane))):
                    return self._send_each(events[i:], lane)
            return self._waiting(frames.drain()) if frames is not None and frames.paused else None
        return sink

    async def _send_each(self, events: list[Event], stream_id: str | None) -> None:
        for event in events:
            await self._send(event, stream_id)

    async def _waiting(self, drained: Awaitable[None]) -> None:
        """Wait for a full buffer to drain, as a pending send: `_watch_sends` sees a client that
        reads nothing."""
        if not self._n_sending:
            self._waiting_since = asyncio.get_running_loop().time()
        self._n_sending += 1
        try:
            await drained
        finally:
            self._n_sending -= 1
            self._waiting_since = asyncio.get_running_loop().time()

    async def _send(self, event: Event, stream_id: str | None = None) -> None:
        _on_lane(event, stream_id)
        if not self._n_sending:
            self._waiting_since = asyncio.get_running_loop().time()
        self._n_sending += 1
        try:
            await _send(self.websocket, event)  # waits while the socket's write buffer is full
        finally:
            self._n_sending -= 1
            self._waiting_since = asyncio.get_running_loop().time()

    async def _watch_sends(self) -> None:
        """Returns once a send has waited `--client-write-timeout` on a client that reads
        nothing: a non-reading client must not hold its generations, slots and buffers."""
        timeout = self.settings.client_write_timeout
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(timeout / 4, 5.0))
            if self._n_sending and loop.time() - self._waiting_since > timeout:
                log.warning("websocket %s: the client read nothing for %g s; closing it", self.connection_id,
                            timeout)
                self.close_code = POLICY_VIOLATION
                return

    async def _send_error(self, exc: APIError, stream_id: str | None = None) -> None:
        trace.error(exc)
        await self._send(error_event(exc, stream_id))

    async def _close(self) -> None:
        websocket = self.websocket
        if WebSocketState.DISCONNECTED in (websocket.application_state, websocket.client_state):
            return
        with contextlib.suppress(*_GONE, OSError):
            await websocket.close(code=self.close_code)


def _on_lane(event: Event, stream_id: str | None) -> Event:
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event


async def _send(websocket: WebSocket, event: dict[str, Any]) -> None:
    await websocket.send({"type": "websocket.send", "text": orjson.dumps(event).decode()})


async def refuse(websocket: WebSocket, max_connections: int) -> None:
    """An accepted socket over the server-wide cap: say why, then close with 1013."""
    await _send(websocket, error_event(connection_limit_reached(f"{max_connections} open connections")))
    await websocket.close(code=TRY_AGAIN_LATER)
