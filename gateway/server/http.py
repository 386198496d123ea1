"""HTTP helpers shared by the endpoints: JSON bodies, JSON/SSE responses, error handlers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.adapters.anthropic_output import error_body
from gateway.core.errors import APIError, invalid_request
from gateway.pipeline import trace
from gateway.pipeline.turn import Hold
from gateway.server.body_writer import BodyWriter

MAX_BODY_BYTES = 64 * 1024 * 1024


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


async def read_json(request: Request, max_bytes: int = MAX_BODY_BYTES, timeout: float | None = None) -> Any:
    return parse_json(await read_body(request, max_bytes, timeout))


async def read_body(request: Request, max_bytes: int = MAX_BODY_BYTES, timeout: float | None = None) -> bytes:
    """The whole body: 413 beyond `max_bytes`, 408 when it takes longer than `timeout` seconds
    (a client that sends a byte and stops must not hold an admission slot)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise APIError(f"Request body is {declared} bytes; the limit is {max_bytes}.", status=413,
                       code="request_too_large")
    chunks = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                chunks += chunk
                if len(chunks) > max_bytes:
                    raise APIError(f"Request body exceeds the limit of {max_bytes} bytes.", status=413,
                                   code="request_too_large")
    except TimeoutError:
        raise APIError(f"The request body did not arrive within {timeout:g} s.", status=408,
                       code="request_timeout") from None
    if not chunks:
        raise invalid_request("The request body is empty; expected a JSON object.")
    return bytes(chunks)


def parse_json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid_request(f"The request body is not valid JSON: {exc}.", code="invalid_json") from None


def sse_event(event: dict[str, Any]) -> bytes:
    """One SSE event: its `event: <type>\ndata: ` prefix rendered once per type, orjson once."""
    type_ = event["type"]
    prefix = _SSE_PREFIXES.get(type_)
    if prefix is None:
        prefix = _SSE_PREFIXES[type_] = b"event: " + type_.encode() + b"\ndata: "
    return prefix + orjson.dumps(event) + b"\n\n"


_SSE_PREFIXES: dict[str, bytes] = {}  # a few dozen event types, ever


# A streaming response's write: None once written, or an awaitable to wait for before more.
Emit = Callable[[bytes], Hold]


class SSEResponse:
    """A `text/event-stream` response: each chunk of `body` goes out as one write.

    What Starlette's StreamingResponse does, minus the anyio task group and wrappers it sets
    up per response: the stream runs in the request's own task, and a watcher task cancels it
    when the client disconnects (so the upstream generation is aborted even while no token
    comes to write). `body` is an async iterator of chunks, or a relay: a coroutine function
    that pushes chunks to the `Emit` it is given, from wherever they come (an upstream read).
    Once the headers are out, chunks are written straight to the transport where the server
    allows it (gateway/server/body_writer.py), else sent through ASGI.
    """

    def __init__(self, body: AsyncGenerator[bytes, None] | Callable[[Emit], Awaitable[None]],
                 cleanup: Callable[[], Awaitable[None]] | None = None) -> None:
        """`cleanup`: awaited however the response ends, even if `body` never started (the
        client left before the headers): it releases the generation."""
        self.body = body
        self.cleanup = cleanup

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        gone = asyncio.get_running_loop().create_task(_cancel_on_disconnect(receive, task))
        try:
            # a fresh list: middlewares add headers to it (x-request-id)
            await send({"type": "http.response.start", "status": 200, "headers": list(_SSE_HEADERS)})
            relay = self.body if callable(self.body) else partial(_pump, self.body)
            await relay(_emitter(BodyWriter.of(scope), send))
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not gone.done() or gone.cancelled():
                raise  # not the client leaving: the server is stopping the task
            task.uncancel()
        finally:
            gone.cancel()
            if not callable(self.body):
                await self.body.aclose()  # also when it never started (the client left before the headers)
            if self.cleanup is not None:
                await self.cleanup()


async def _pump(body: AsyncGenerator[bytes, None], emit: Emit) -> None:
    async for chunk in body:
        if (hold := emit(chunk)) is not None:
            await hold


def _emitter(writer: BodyWriter | None, send: Send) -> Emit:
    def sent(chunk: bytes) -> Awaitable[None]:
        return send({"type": "http.response.body", "body": chunk, "more_body": True})

    if writer is None:
        return sent

    def written(chunk: bytes) -> Hold:
        if not writer.write(chunk):
            return sent(chunk)
        return writer.drain() if writer.paused else None
    return written


_SSE_HEADERS = ((b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no"),
                (b"content-type", b"text/event-stream; charset=utf-8"))


async def _cancel_on_disconnect(receive: Receive, task: asyncio.Task) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    task.cancel()


def sse_response(body: AsyncGenerator[bytes, None] | Callable[[Emit], Awaitable[None]],
                 cleanup: Callable[[], Awaitable[None]] | None = None) -> SSEResponse:
    return SSEResponse(body, cleanup)


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
    body = error_body(exc) if path is not None and path.startswith("/v1/messages") else exc.http_body()
    return JSONResponse(body, status_code=exc.status, headers=exc.headers())


async def api_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    trace.error(exc)  # the access log line says why
    return error_response(exc)


async def http_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error = APIError(exc.detail if isinstance(exc.detail, str) else "HTTP error", status=exc.status_code,
                     type="invalid_request_error" if exc.status_code < 500 else "server_error")
    if exc.status_code == 404:
        error.message = f"No route for {request.method} {request.url.path}."
    elif exc.status_code == 405:
        error.message = f"Method {request.method} is not allowed on {request.url.path}."
    return JSONResponse(error.http_body(), status_code=exc.status_code)
