"""Stored responses: GET /v1/responses/{id}, its input items, DELETE, and cancelling a
background response (POST /v1/responses/{id}/cancel).

Responses created with `store: true` (OpenAI's default) are kept in the same store as
`previous_response_id` continues (gateway/pipeline/session.py). A `background: true`
response runs as a task of the process that took it; its state is stored as it goes, so a
poll sees `queued`/`in_progress`, then the final response. Its events are kept too
(gateway/server/_event_log.py): `stream: true` streams them as they come, and
`GET /v1/responses/{id}?stream=true&starting_after=N` resumes after event N, in the process
that runs it. The task holds its place at the gate (`--max-concurrent-requests`, the tenant's
limits) until it ends, as a streamed response does; in a full gateway with a queue
(`--max-queued-requests`) it is answered at once all the same, and waits `queued` for its place. Cancelling reaches the task only in that process (elsewhere: 404
from the task registry, the stored state stays).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.responses.events import Event
from gateway.adapters.responses.stored import input_items_page
from gateway.adapters.responses.turn import ResponseTurn
from gateway.core.errors import APIError
from gateway.core.push import Hold
from gateway.formats.base import ParseEvent
from gateway.pipeline import exchange, session
from gateway.pipeline.exchange import ToolsRan
from gateway.pipeline.gate import Pass
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.turn import Turn
from gateway.server._event_log import EventLog, EventLogs
from gateway.server.http import JSONResponse, sse_response
from gateway.store.responses import CachedResponse

__all__ = ["Background", "cancel_response", "delete_response", "get_response", "list_input_items",
           "run_in_background"]

_running: dict[str, asyncio.Task[None]] = {}  # background responses this process runs, by id
_logs = EventLogs()  # their events, for streams that start or resume on them
_leaving: set[asyncio.Future[None]] = set()  # cancelled tasks' places at the gate, being given back


async def get_response(request: Request) -> Response:
    found = await _found(request)
    if request.query_params.get("stream") not in ("true", "1"):
        return JSONResponse(found.response)
    after = _starting_after(request.query_params.get("starting_after"))
    log = _logs.get(found.response_id)
    if log is None:
        raise APIError(f"Response '{found.response_id}' cannot be streamed: only the events of a background "
                       f"response are kept, by the gateway process that runs it, for a while after it ends.",
                       status=400, param="stream", code="response_not_streamable")
    return sse_response(functools.partial(log.follow, after=after))


def _starting_after(raw: str | None) -> int:
    if raw is None:
        return -1
    try:
        after = int(raw)
    except ValueError:
        after = None
    if after is None or after < 0:
        raise APIError(f"Invalid 'starting_after': {raw!r}; expected an event's sequence_number (an integer "
                       f">= 0).", status=400, param="starting_after", code="invalid_value")
    return after


async def list_input_items(request: Request) -> Response:
    found = await _found(request)
    items = found.conversation.items[:found.inputs]
    return JSONResponse(input_items_page(found.response_id, items, request.query_params))


async def delete_response(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    response_id = request.path_params["response_id"]
    if not await session.delete_stored(runtime, response_id):
        raise _not_found(response_id)
    return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})


async def cancel_response(request: Request) -> Response:
    response_id = request.path_params["response_id"]
    task = _running.get(response_id)
    if task is None:
        found = await _found(request)
        raise APIError(f"Response '{response_id}' is not a running background response (status "
                       f"'{found.response.get('status')}').", status=400, param="response_id",
                       code="response_not_cancellable")
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.shield(task)
    return JSONResponse((await _found(request)).response)


async def run_in_background(made: ResponseTurn) -> Response:
    """Start the turn as a task; answer the `queued` response now, or with `stream`, the
    events as they come (the client leaving does not stop the task). Its place at the gate is
    taken first, or its wait for one in a full gateway's queue begun (a 429 over a budget, before
    anything is stored), and held by the task."""
    output = Background(made)
    entering = await exchange.queue(made.turn, output)  # stored as queued
    response_id = made.writer.response_id
    log = output.log = _logs.open(response_id)
    output.queued()
    task = asyncio.create_task(_background(made, output, entering))
    _running[response_id] = task

    def ended(_: asyncio.Task[None]) -> None:
        _running.pop(response_id, None)
        _logs.finished(response_id)
        if task.cancelled():  # possibly before the exchange ran, which gives the place back otherwise
            _leaving.add(leaving := asyncio.ensure_future(exchange.release(entering)))
            leaving.add_done_callback(_leaving.discard)

    task.add_done_callback(ended)
    if made.parsed.stream:
        return sse_response(log.follow)
    return JSONResponse(made.writer.response("queued"))


async def _background(made: ResponseTurn, output: Background, admitted: Pass | exchange.Entering) -> None:
    """The exchange, its events into the response's log; the exchange stores its state as it goes
    (`in_progress` once a replica accepted the prompt, then the final response, `failed` or `cancelled`)."""
    with contextlib.suppress(asyncio.CancelledError):  # the exchange stored it as cancelled
        await exchange.run(made.turn, output, admitted=admitted)


class Background:
    """The exchange's writer of a background response (an `exchange.Kept`): the Responses events,
    into the response's log (`log`, opened once the response is admitted), and its state as GET
    answers it while it runs. A failure before it started is a failed response too."""

    def __init__(self, made: ResponseTurn) -> None:
        self.writer = made.writer
        self.log: EventLog | None = None
        self.output = made.output(self._logged)
        self.keeps = self.output.keeps
        self._started = False

    def _logged(self, events: list[Event]) -> Hold:
        assert self.log is not None, "opened when admitted"
        self.log.add(events)
        return None

    def queued(self) -> None:
        """The response's first events: created and queued (it runs once it has its place)."""
        self._logged(self.writer.queued())

    def state(self, *, cancelled: bool = False) -> dict[str, Any]:
        last = self.output.last
        if cancelled:
            return self.writer.response("cancelled")
        if last is not None and last["type"] == "response.failed":
            return last["response"]
        return self.writer.response("in_progress" if self._started else "queued")

    def started(self, turn: Turn) -> Hold:
        self._started = True
        return self.output.started(turn)

    def events(self, events: list[ParseEvent]) -> Hold:
        return self.output.events(events)

    async def run_tools(self, turn: Turn) -> ToolsRan | None:
        return await self.output.run_tools(turn)

    def answer(self, turn: Turn) -> dict[str, Any] | None:
        return self.output.answer(turn)

    def ended(self, turn: Turn) -> Hold:
        return self.output.ended(turn)

    def failed(self, turn: Turn, error: APIError) -> Hold:
        try:
            return self.output.failed(turn, error)
        except APIError:  # refused before it started (answered as an HTTP error in the foreground)
            self.output.last = self.writer.failed(error.code or "server_error", error.message)
            return self._logged([self.output.last])


async def _found(request: Request) -> CachedResponse:
    runtime: Runtime = request.app.state.runtime
    response_id = request.path_params["response_id"]
    found = await session.stored(runtime, response_id)
    if found is None or found.response is None:
        raise _not_found(response_id)
    return found


def _not_found(response_id: str) -> APIError:
    return APIError(f"No response with id '{response_id}' found: only responses created with store=true on "
                    f"this gateway are kept.", status=404, param="response_id", code="response_not_found")
