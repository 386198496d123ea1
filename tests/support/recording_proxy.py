"""A thin HTTP proxy in front of a real vLLM that records each generation's exact tokens.

Sits between the gateway and vLLM, forwards every request unchanged, and for each
/inference/v1/generate call keeps the prompt token ids (and image URLs) vLLM received and the token ids
it streamed back: the ground truth a rollout's trajectory must equal.

    with RecordingProxy(vllm.url) as proxy:
        ... point the gateway at proxy.url ...
        proxy.exchanges[-1].prompt, proxy.exchanges[-1].output
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Self

import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.support.threaded_server import serve_in_thread

GENERATE = "/inference/v1/generate"
_HOP_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "host", "content-encoding",
                          "accept-encoding"})


@dataclass
class Exchange:
    prompt: list[int]
    output: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    images: list[str] = field(default_factory=list)  # the `content_parts` image URLs sent, in order


@dataclass
class RecordingProxy:
    target: str
    exchanges: list[Exchange] = field(default_factory=list)  # finished generations, in order
    url: str = ""

    def __enter__(self) -> Self:
        app = Starlette(routes=[Route("/{path:path}", self._forward, methods=["GET", "POST", "DELETE"])])
        self._serving = serve_in_thread(app, "the recording proxy")
        self.url = f"http://127.0.0.1:{self._serving.__enter__()}"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._serving.__exit__(None, None, None)

    async def _forward(self, request: Request) -> Response:
        body = await request.body()
        client = httpx.AsyncClient(timeout=None)
        upstream = await client.send(client.build_request(
            request.method, self.target + request.url.path, params=request.query_params, content=body,
            headers={k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}), stream=True)
        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS}
        exchange = None
        if request.url.path == GENERATE and upstream.status_code == 200:
            sent = orjson.loads(body)
            exchange = Exchange(prompt=sent["token_ids"], images=[
                part["url"] for part in sent.get("content_parts") or () if part.get("type") == "image_url"])

        async def relay() -> AsyncIterator[bytes]:
            buffer = b""
            try:
                async for chunk in upstream.aiter_raw():
                    if exchange is not None:
                        buffer = self._record(exchange, buffer + chunk)
                    yield chunk
                if exchange is not None:
                    self._record(exchange, buffer + b"\n\n")
                    self.exchanges.append(exchange)
            finally:
                await upstream.aclose()
                await client.aclose()

        return StreamingResponse(relay(), status_code=upstream.status_code, headers=headers)

    @staticmethod
    def _record(exchange: Exchange, buffer: bytes) -> bytes:
        """Collect the token ids of complete SSE events (or a whole JSON body); return the rest."""
        *events, rest = buffer.split(b"\n\n")
        for event in events:
            data = event.removeprefix(b"data: ").strip()
            if not data or data == b"[DONE]":
                continue
            for choice in orjson.loads(data).get("choices") or []:
                exchange.output.extend(choice.get("token_ids") or [])
                exchange.finish_reason = choice.get("finish_reason") or exchange.finish_reason
        return rest
