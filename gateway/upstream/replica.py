"""One stock vLLM server: what we know about it and how to stream tokens from it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from gateway.core import tracing
from gateway.core.errors import UpstreamFailed, UpstreamRejected, UpstreamUnavailable, invalid_request
from gateway.core.image import Image
from gateway.upstream.connection import ConnectError, Connections, ConnectTimeout, Stale
from gateway.upstream.outlier import OutlierDetector, OutlierRecord
from gateway.upstream.protocol import (
    PATHS,
    UpstreamAPI,
    encode,
    engine_request_id,
    request_body,
)
from gateway.upstream.stream import StreamMode, UpstreamStream

__all__ = ["Replica", "UpstreamStream"]

log = logging.getLogger(__name__)

# Answers that mean "this replica cannot take it now": another replica may.
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass(eq=False)
class Replica:
    """`state`: "starting" (probing and warming up), "ready" (routable), "ejected" (failing;
    re-probed with backoff) or "draining" (gone from DNS; dropped once idle)."""

    url: str
    client: httpx.AsyncClient
    api: UpstreamAPI = "completions"
    state: str = "starting"
    role: str = "both"  # in prefill/decode disaggregation: "prefill", "decode" or "both"
    inflight: int = 0  # requests picked for this replica and not finished
    requests: int = 0  # requests sent, ever
    max_model_len: int | None = None
    served_model: str | None = None
    streams: set[UpstreamStream] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # set: health-check now
    header_timeout: float | None = None  # seconds to wait for a generation's response headers
    idle_timeout: float | None = 300.0  # seconds a generation may go without a byte from the replica
    connections: Connections = field(init=False)  # the token streams' keep-alive connections
    detector: OutlierDetector | None = None  # the pool's outlier detection (gateway/upstream/outlier.py)
    outlier: OutlierRecord = field(default_factory=OutlierRecord)  # this replica's counts in it
    # The fleet's control plane (gateway/upstream/control.py): the label of the weights it serves
    # (vLLM's own starts at "default"), the LoRA adapters it holds, and why it is out of routing
    # while its weights are not the fleet's (a failed update): None when they are.
    weight_version: str = "default"
    adapters: dict[str, str | None] = field(default_factory=dict)  # LoRA name → its path (vLLM's `root`)
    fenced: str | None = None

    def __post_init__(self) -> None:
        self.connections = Connections(self.url, idle_timeout=self.idle_timeout)

    @property
    def healthy(self) -> bool:
        """Probed, warmed up and passing its health checks."""
        return self.state == "ready"

    @property
    def routable(self) -> bool:
        """Healthy, and serving the fleet's weights."""
        return self.state == "ready" and self.fenced is None

    def eject(self, reason: str, *, kind: str = "unreachable", hold: bool = False) -> None:
        """Out of the pool until readmitted (`hold`: not before its ejection time either)."""
        if self.state == "ready":
            self.state = "ejected"
            if self.detector is not None:
                self.detector.ejected(self, reason, kind, hold)
            else:
                log.warning("replica %s ejected: %s", self.url, reason)
        self.wake.set()

    def ended(self, failure: str | None) -> None:
        """A request on this replica ended: `failure` says why it failed, None if it succeeded."""
        if self.detector is not None:
            self.detector.record(self, failure)

    def serves(self, leg: str) -> bool:
        """Whether this replica takes `leg` ("decode": every generation; "prefill": a prefill leg)."""
        return self.role == "both" or self.role == leg

    async def open(self, prompt_ids: Sequence[int], sampling: dict[str, Any], request_id: str,
                   images: Sequence[Image] = (), model: str | None = None) -> UpstreamStream:
        """Send the request and wait for the replica to accept it (HTTP 200); `model`: a LoRA
        adapter it holds, else its base model.

        Raises UpstreamUnavailable when nothing was accepted, so the caller may try
        another replica, and UpstreamFailed when the replica rejected the request.
        """
        if images and self.api != "generate":  # /v1/completions drops them without a word
            raise invalid_request(f"Images need vLLM's /inference/v1/generate (--enable-scale-out); replica "
                                  f"{self.url} serves token prompts on /v1/completions only.", param="input",
                                  code="images_need_generate")
        body = request_body(self.api, model=model or self.served_model or "", prompt_ids=prompt_ids,
                            sampling=sampling, request_id=request_id, stream=True, images=images)
        return await self.forward(PATHS[self.api], encode(body), request_id)

    async def forward(self, path: str, body: bytes, request_id: str, mode: StreamMode = "tokens") -> UpstreamStream:
        """`open` for a body the caller made: a client's own request to one of vLLM's endpoints
        (`mode`: how its answer is handed on, gateway/upstream/stream.py)."""
        # The current span as `traceparent` (traces on): the replica's spans join the request's trace.
        request = self.connections.request_bytes(path, body, tracing.upstream_headers())
        self.inflight += 1  # counted from the pick on, so concurrent picks see it
        self.requests += 1
        try:
            stream = await self._send(request, request_id, mode)
        except BaseException:  # cancelled too
            self.inflight -= 1
            raise
        self.streams.add(stream)
        return stream

    async def _send(self, request: bytes, request_id: str, mode: StreamMode) -> UpstreamStream:
        stream = UpstreamStream(self, request_id, mode)
        try:
            async with asyncio.timeout(self.header_timeout):
                stream.connection = await self.connections.send(request, stream)
                error = await stream.answered()
                if isinstance(error, Stale):  # the request never reached the replica: once more, on a new one
                    stream = UpstreamStream(self, request_id, mode)
                    stream.connection = await self.connections.send(request, stream)
                    error = await stream.answered()
        except TimeoutError as exc:  # a replica that stalls is suspected like one that refuses connections
            stream.close_connection()
            self.eject(f"no response headers within {self.header_timeout:g} s", kind="stalled", hold=True)
            raise UpstreamUnavailable(f"replica {self.url} sent no response headers within "
                                      f"{self.header_timeout:g} s", timed_out=True) from exc
        except ConnectTimeout as exc:  # busy, perhaps: a failure like a 5xx, not an ejection by itself
            self.ended(f"unreachable: {exc}")
            raise UpstreamUnavailable(f"replica {self.url} is unreachable: {exc}", timed_out=True) from exc
        except ConnectError as exc:
            self.eject(f"unreachable: {exc}")
            raise UpstreamUnavailable(f"replica {self.url} is unreachable: {exc}") from exc
        except BaseException:
            stream.close_connection()
            raise
        if isinstance(error, ConnectError):
            self.eject(f"unreachable: {error}")
            raise UpstreamUnavailable(f"replica {self.url} is unreachable: {error}") from error
        if error is not None and stream.status is None:
            self.ended(f"closed before answering: {error}")
            raise UpstreamUnavailable(f"replica {self.url} failed before answering: {error}") from error
        if stream.status == 200:
            return stream
        stream.close_connection()
        text = stream.error_text()
        if stream.status in RETRYABLE_STATUS:
            if stream.status != 429:  # busy is not failing
                self.ended(f"answered {stream.status}")
            raise UpstreamUnavailable(f"replica {self.url} answered {stream.status}: {text}")
        detail = f"replica {self.url} rejected the request ({stream.status}): {text}"
        if stream.status in (400, 422):  # the request's fault: the client hears why
            raise UpstreamRejected(detail, _error_message(text))
        raise UpstreamFailed(detail)

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
            await self.client.post(self.url + "/inference/v1/abort_requests", headers=tracing.propagation_headers(),
                                   json={"request_ids": [engine_request_id(self.api, request_id)]}, timeout=2.0)
        except httpx.HTTPError as exc:
            log.debug("abort on %s failed: %r", self.url, exc)


def _error_message(text: str) -> str:
    """vLLM's error body's message (`{"error": {"message": ...}}`), else the text itself."""
    try:
        error = orjson.loads(text).get("error")
        message = error.get("message") if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        message = None
    return str(message or text or "no reason given")[:500]
