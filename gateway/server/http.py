"""HTTP helpers shared by the endpoints: JSON bodies, JSON/SSE responses, error handlers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.adapters.anthropic.output import error_body
from gateway.adapters.validation import parse_json
from gateway.core.errors import APIError, invalid_request
from gateway.core.push import Hold, Sink
from gateway.pipeline import trace
from gateway.server._body_encoding import body_decoder, too_large
from gateway.server.body_writer import BodyWriter

__all__ = ["JSONResponse", "api_error_handler", "error_payload", "error_response", "http_error_handler", "model_route",
           "read_json", "sse_event", "sse_response"]

MAX_BODY_BYTES = 64 * 1024 * 1024


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


async def read_json(request: Request, max_bytes: int = MAX_BODY_BYTES, timeout: float | None = None) -> Any:
    return parse_json(await read_body(request, max_bytes, timeout))


def model_route(answer: Callable[[Request, bytes], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """A route that generates: its body read within `--max-request-bytes` and
    `--request-body-timeout`, and its answer cancelled when the client leaves (which aborts the
    generation), for every API alike."""
    async def route(request: Request) -> Response:
        settings = request.app.state.settings
        raw = await read_body(request, settings.max_body_bytes, settings.request_body_timeout)
        async with cancelled_on_disconnect(request):
            return await answer(request, raw)
    return route


async def read_body(request: Request, max_bytes: int = MAX_BODY_BYTES, timeout: float | None = None) -> bytes:
    """The whole body, decoded if it came compressed (gateway/server/_body_encoding.py): 413
    beyond `max_bytes` (sent or decoded), 415 for an encoding the gateway does not decode, 408
    when it takes longer than `timeout` seconds (a client that sends a byte and stops must not
    hold a connection for long)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise APIError(f"Request body is {declared} bytes; the limit is {max_bytes}.", status=413,
                       code="request_too_large")
    decoder = body_decoder(request.headers.get("content-encoding"), max_bytes)
    chunks, received = bytearray(), 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                received += len(chunk)
                if received > max_bytes:
                    raise too_large(max_bytes)
                if decoder is None:
                    chunks += chunk
                elif chunk:
                    decoder.feed(chunk)  # the decoded body is the one kept
    except TimeoutError:
        raise APIError(f"The request body did not arrive within {timeout:g} s.", status=408,
                       code="request_timeout") from None
    if not received:
        raise invalid_request("The request body is empty; expected a JSON object.")
    return decoder.finish() if decoder is not None else bytes(chunks)


def sse_event(event: dict[str, Any]) -> bytes:
    """One SSE event: its `event: <type>\ndata: ` prefix rendered once per type, orjson once."""
    type_ = event["type"]
    prefix = _SSE_PREFIXES.get(type_)
    if prefix is None:
        prefix = _SSE_PREFIXES[type_] = b"event: " + type_.encode() + b"\ndata: "
    return prefix + orjson.dumps(event) + b"\n\n"


_SSE_PREFIXES: dict[str, bytes] = {}  # a few dozen event types, ever




class SSEResponse:
    """A `text/event-stream` response whose body a relay pushes, from wherever its chunks come
    (an upstream read): `relay(sink)` writes each chunk with `sink`.

    What Starlette's StreamingResponse does, minus the anyio task group and wrappers it sets
    up per response: the relay runs in the request's own task, and a watcher task cancels it
    when the client disconnects (so the upstream generation is aborted even while no token
    comes to write). The headers go out with the first chunk: a relay that fails before writing
    anything (a prompt no replica accepts) raises, and is answered as an ordinary HTTP error.
    Chunks are written straight to the transport where the server allows it
    (gateway/server/body_writer.py), else sent through ASGI.
    """

    def __init__(self, relay: Callable[[Sink[bytes]], Awaitable[None]]) -> None:
        self.relay = relay

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        gone = asyncio.get_running_loop().create_task(_cancel_on_disconnect(receive, task))
        body = _Body(BodyWriter.of(scope), send)
        try:
            await self.relay(body.write)
            if not body.started:
                await body.start()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not gone.done() or gone.cancelled():
                raise  # not the client leaving: the server is stopping the task
            task.uncancel()
        finally:
            gone.cancel()


class _Body:
    """A streamed body: `write` is its `Sink[bytes]`, and the first chunk sends the headers with it."""

    __slots__ = ("_send", "_writer", "started")

    def __init__(self, writer: BodyWriter | None, send: Send) -> None:
        self._writer = writer
        self._send = send
        self.started = False

    def write(self, chunk: bytes) -> Hold:
        if not self.started:
            return self._first(chunk)
        writer = self._writer
        if writer is None or not writer.write(chunk):
            return self._sent(chunk)
        return writer.drain() if writer.paused else None

    async def start(self) -> None:
        self.started = True
        # a fresh list: middlewares add headers to it (x-request-id)
        await self._send({"type": "http.response.start", "status": 200, "headers": list(_SSE_HEADERS)})

    async def _first(self, chunk: bytes) -> None:
        await self.start()
        await self._sent(chunk)

    def _sent(self, chunk: bytes) -> Awaitable[None]:
        return self._send({"type": "http.response.body", "body": chunk, "more_body": True})


_SSE_HEADERS = ((b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no"),
                (b"content-type", b"text/event-stream; charset=utf-8"))


async def _cancel_on_disconnect(receive: Receive, task: asyncio.Task) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    task.cancel()


def sse_response(relay: Callable[[Sink[bytes]], Awaitable[None]]) -> SSEResponse:
    return SSEResponse(relay)


class ClientGone(APIError):
    """The client closed the connection before its answer: nobody reads this one (logged as 499)."""

    def __init__(self) -> None:
        super().__init__("The client closed the request.", status=499, code="client_closed_request")


@contextlib.asynccontextmanager
async def cancelled_on_disconnect(request: Request) -> AsyncIterator[None]:
    """Work on a request whose body was read, cancelled when its client disconnects (then
    `ClientGone`): a JSON answer, or a stream that still waits for a replica's headers."""
    task = asyncio.current_task()
    assert task is not None
    gone = asyncio.get_running_loop().create_task(_cancel_on_disconnect(request.receive, task))
    try:
        yield
    except asyncio.CancelledError:
        if not gone.done() or gone.cancelled():
            raise
        task.uncancel()
        raise ClientGone() from None
    finally:
        gone.cancel()


def error_response(exc: APIError, path: str | None = None) -> JSONResponse:
    """`exc` over HTTP, in the shape of the API at `path` (Anthropic's for /v1/messages...)."""
    return JSONResponse(error_payload(exc, path), status_code=exc.status, headers=exc.headers())


def error_payload(exc: APIError, path: str | None = None) -> dict:
    """`exc`'s JSON body as the API at `path` writes errors (Anthropic's for /v1/messages...)."""
    return error_body(exc) if path is not None and path.startswith("/v1/messages") else exc.http_body()


async def api_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    trace.error(exc)  # the access log line says why
    return error_response(exc, request.url.path)


async def http_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error = APIError(exc.detail if isinstance(exc.detail, str) else "HTTP error", status=exc.status_code,
                     type="invalid_request_error" if exc.status_code < 500 else "server_error")
    if exc.status_code == 404:
        error.message = f"No route for {request.method} {request.url.path}."
    elif exc.status_code == 405:
        error.message = f"Method {request.method} is not allowed on {request.url.path}."
    return JSONResponse(error.http_body(), status_code=exc.status_code)
