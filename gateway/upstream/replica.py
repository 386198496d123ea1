"""One stock vLLM server: what we know about it and how to stream tokens from it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from gateway.errors import UpstreamFailed, UpstreamUnavailable
from gateway.upstream.chunks import TokenChunk, Usage
from gateway.upstream.protocol import (
    PATHS,
    UpstreamAPI,
    encode,
    engine_request_id,
    parse_choice,
    parse_usage,
    request_body,
)

log = logging.getLogger(__name__)

# Answers that mean "this replica cannot take it now": another replica may.
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})

YIELD_EVERY = 16  # upstream reads between turns given to the other tasks


@dataclass(eq=False)
class Replica:
    """`state`: "starting" (probing and warming up), "ready" (routable), "ejected" (failing;
    re-probed with backoff) or "draining" (gone from DNS; dropped once idle)."""

    url: str
    client: httpx.AsyncClient
    api: UpstreamAPI = "completions"
    state: str = "starting"
    inflight: int = 0  # requests picked for this replica and not finished
    requests: int = 0  # requests sent, ever
    max_model_len: int | None = None
    served_model: str | None = None
    streams: set[UpstreamStream] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # set: health-check now

    @property
    def healthy(self) -> bool:
        """Routable: probed, warmed up and passing its health checks."""
        return self.state == "ready"

    def eject(self, reason: str) -> None:
        if self.state == "ready":
            log.warning("replica %s ejected: %s", self.url, reason)
            self.state = "ejected"
        self.wake.set()

    async def open(self, prompt_ids: Sequence[int], sampling: dict[str, Any], request_id: str) -> UpstreamStream:
        """Send the request and wait for the replica to accept it (HTTP 200).

        Raises UpstreamUnavailable when nothing was accepted, so the caller may try
        another replica, and UpstreamFailed when the replica rejected the request.
        """
        body = request_body(self.api, model=self.served_model or "", prompt_ids=prompt_ids,
                            sampling=sampling, request_id=request_id, stream=True)
        request = self.client.build_request("POST", self.url + PATHS[self.api], content=encode(body),
                                            headers={"content-type": "application/json"})
        self.inflight += 1  # counted from the pick on, so concurrent picks see it
        self.requests += 1
        try:
            return await self._send(request, request_id)
        except BaseException:  # cancelled too
            self.inflight -= 1
            raise

    async def _send(self, request: httpx.Request, request_id: str) -> UpstreamStream:
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
                self.eject(f"unreachable: {exc!r}")
            raise UpstreamUnavailable(f"replica {self.url} is unreachable: {exc!r}") from exc
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")[:500]
            await response.aclose()
            if response.status_code in RETRYABLE_STATUS:
                raise UpstreamUnavailable(f"replica {self.url} answered {response.status_code}: {text}")
            raise UpstreamFailed(f"replica {self.url} rejected the request ({response.status_code}): {text}")
        return UpstreamStream(self, response, request_id)

    def interrupt(self) -> int:
        """Fail every open stream (the gateway is shutting down); returns how many."""
        streams = list(self.streams)
        for stream in streams:
            stream.interrupt()
        return len(streams)

    async def abort(self, request_id: str) -> None:
        """Closing the stream already makes vLLM abort; the abort endpoint makes sure."""
        if self.api != "generate":
            return
        try:
            await self.client.post(self.url + "/inference/v1/abort_requests",
                                   json={"request_ids": [engine_request_id(self.api, request_id)]}, timeout=2.0)
        except httpx.HTTPError as exc:
            log.debug("abort on %s failed: %r", self.url, exc)


class UpstreamStream:
    """An accepted streaming generation. Iterate for chunks; `aclose()` aborts if unfinished."""

    def __init__(self, replica: Replica, response: httpx.Response, request_id: str) -> None:
        self.replica = replica
        self.request_id = request_id
        self._response = response
        self._finished = False
        self._closed = False
        self._interrupted = False
        self._reader: asyncio.Task | None = None  # the task waiting for the next read, if one is
        replica.streams.add(self)

    async def __aiter__(self) -> AsyncIterator[TokenChunk | Usage]:
        api, url = self.replica.api, self.replica.url
        try:
            async for data in self._payloads():
                if data == b"[DONE]":
                    # Read on to the response's end, so that its connection goes back to the pool
                    # instead of being closed: a new connection costs more than a short request.
                    self._finished = True
                    continue
                payload = orjson.loads(data)
                if "error" in payload:
                    error = payload["error"]
                    message = error.get("message") if isinstance(error, dict) else str(error)
                    raise UpstreamFailed(f"replica {url} failed mid-stream: {message}")
                for choice in payload.get("choices") or ():
                    yield parse_choice(api, choice)
                if (usage := parse_usage(payload)) is not None:
                    yield usage
        except httpx.HTTPError as exc:
            self.replica.wake.set()  # a dead replica is found (and ejected) by the next health check
            raise UpstreamFailed(f"replica {url} stream broke: {exc!r}") from exc
        if self._finished:
            return
        if self._interrupted:
            raise UpstreamFailed("the gateway is shutting down; the generation was stopped")
        raise UpstreamFailed(f"replica {url} closed the stream before it finished")

    async def _payloads(self) -> AsyncIterator[bytes]:
        """The SSE `data:` payloads as bytes (orjson takes bytes: no text decoding)."""
        reads = self._response.aiter_raw()
        pending = b""
        count = 0
        while not self._interrupted:
            data = await self._next_read(reads)
            if data is None:
                return
            lines = (pending + data).split(b"\n") if pending else data.split(b"\n")
            pending = lines.pop()
            for line in lines:
                if line.startswith(b"data:"):
                    yield line[5:].strip()
            count += 1
            if count % YIELD_EVERY == 0:
                # A replica that streams faster than we relay fills our socket buffer, and then
                # reads never wait: let the other streams (and new connections) have the loop.
                await asyncio.sleep(0)

    async def _next_read(self, reads: AsyncIterator[bytes]) -> bytes | None:
        self._reader = asyncio.current_task()
        try:
            return await anext(reads)
        except StopAsyncIteration:
            return None
        except asyncio.CancelledError:
            if not self._interrupted or self._reader is None:
                raise
            self._reader.uncancel()  # our own cancel (interrupt): end the stream as failed instead
            return None
        finally:
            self._reader = None

    def interrupt(self) -> None:
        """Stop waiting for tokens: iteration raises UpstreamFailed, and `aclose()` aborts upstream."""
        self._interrupted = True
        if self._reader is not None:
            self._reader.cancel()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.replica.inflight -= 1
        self.replica.streams.discard(self)
        await self._response.aclose()
        if not self._finished:
            await self.replica.abort(self.request_id)
