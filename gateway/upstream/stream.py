"""One accepted streaming generation: SSE payloads off the connection, token chunks to the turn.

The connection hands over each read's body bytes at once (gateway/upstream/connection.py);
`on_body` splits them into SSE `data:` payloads in one `split`. A chunk boundary may fall
anywhere (inside a UTF-8 character, inside `data: [DONE]`, between the two newlines): bytes
are only ever split at a newline, and the unfinished line waits for the next read. Each
read's payloads become one TokenChunk with all their tokens (and the Usage, if one came).

`relay(sink)` hands them on: the chunks of each read go to `sink` at once, from the read's own
callback. At engine pace a stream gets one token per read, and this is what makes such a
token cheap: no task wakes up, no async generator resumes, for it. The sink returns None to
go on, or an awaitable (a slow client's drain) that the relay waits for, the connection's
reading paused meanwhile, before it hands on more; what was read meanwhile then goes on in one
batch (one parse, one client write for many tokens), so a relay that falls behind catches up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Literal, Protocol

import orjson

from gateway.core.errors import UpstreamFailed, shutting_down
from gateway.core.push import Hold, Sink
from gateway.upstream.chunks import TokenChunk, Usage
from gateway.upstream.connection import Connection, IdleTimeout
from gateway.upstream.protocol import UpstreamAPI, parse_choice, parse_expansion, parse_usage

__all__ = ["StreamMode", "UpstreamStream"]

# What a stream hands its sink: "tokens", the decoded TokenChunks (a turn the gateway parses);
# "events", each SSE event's JSON payload as the replica sent it; "body", a non-streamed answer's
# whole JSON body, once (token-in traffic passed through: gateway/pipeline/token_turn.py).
StreamMode = Literal["tokens", "events", "body"]
MAX_UNTAKEN = 1024  # payloads read ahead of a slow client before the connection stops reading



class Owner(Protocol):
    """What a stream reports to and asks of the replica it came from (gateway/upstream/replica.py's
    `Replica`): the replica's side of one generation."""

    url: str
    api: UpstreamAPI
    inflight: int  # generations picked for it and not finished
    streams: set[UpstreamStream]
    wake: asyncio.Event  # set: health-check it now
    weight_version: str  # the label of the weights it serves (gateway/upstream/control.py)

    def eject(self, reason: str, *, kind: str = ..., hold: bool = ...) -> None: ...
    def ended(self, failure: str | None) -> None: ...
    async def abort(self, request_id: str) -> None: ...


class UpstreamStream:
    """A generation's response. `Replica.open` returns it once the replica accepted (HTTP 200);
    `relay` hands on its chunks; `aclose()` aborts the generation if it is unfinished."""

    def __init__(self, replica: Owner, request_id: str, mode: StreamMode = "tokens") -> None:
        self.replica = replica
        self.request_id = request_id
        self.mode = mode
        self.status: int | None = None
        self.cancelled = False  # aborted by name (the fleet's /abort_requests): not to be resumed
        self.connection: Connection | None = None  # None once the response ended or was dropped
        self._answer: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        self._error_body: list[bytes] = []  # a non-200 answer's body
        self._whole: list[bytes] = []  # mode "body": the answer's body so far
        self._pending = b""  # the unfinished last line of the body read so far
        self._payloads: list[bytes] = []  # SSE `data:` payloads read and not yet taken
        self._paused = False  # the connection stopped reading for us
        self._finished = False  # `data: [DONE]` came
        self._ended = False  # the response ended, broke or was interrupted
        self._interrupted = False
        self._error: Exception | None = None  # why the response broke, if it did
        self._wake: asyncio.Future | None = None  # the relay waiting for payloads
        self._closing: asyncio.Future | None = None
        self._sink: Sink[list[TokenChunk | Usage]] | None = None  # where reads go at once, while `relay` runs
        self._hold: Hold = None  # what the sink asked the relay to wait for
        self._sink_error: BaseException | None = None  # what the sink (or the replica) raised mid-relay
        self._relay_stopped = False
        self._fault: str | None = None  # a malformed event or the replica's in-stream error

    # the connection's Receiver
    def on_headers(self, status: int) -> None:
        self.status = status
        if status == 200 and not self._answer.done():
            self._answer.set_result(None)

    def on_body(self, data: bytes) -> None:
        if self.status != 200:
            self._error_body.append(data)
            return
        if self.mode == "body":
            self._whole.append(data)  # handed on once it ended
            return
        if not self._pending and data[-2:] == b"\n\n" and data.find(b"\n") == len(data) - 2:
            lines: Sequence[bytes] = (data[:-2],)  # one whole event (a read at engine pace): no split
        else:
            lines = (self._pending + data if self._pending else data).split(b"\n")
            self._pending = lines.pop()
        payloads = self._payloads
        n_before = len(payloads)
        for line in lines:
            if line[:5] == b"data:":
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    self._finished = True
                else:
                    payloads.append(payload)
        if len(payloads) > n_before:
            if self._sink is not None and self._hold is None and self._sink_error is None:
                self._deliver()
                return
            self._wake_relay()
            if len(payloads) >= MAX_UNTAKEN and self.connection is not None:  # the client reads slower
                self._paused = True
                self.connection.pause()

    def on_end(self, error: Exception | None) -> None:
        self.connection = None
        self._ended = True
        if self.mode == "body" and error is None and self.status == 200:
            self._payloads.append(b"".join(self._whole))
            self._finished = True
        if error is not None and self.status == 200:
            self._error = self._stream_error(error)
        if not self._answer.done():
            self._answer.set_result(error)
        self._wake_relay()

    def _stream_error(self, error: Exception) -> UpstreamFailed:
        url = self.replica.url
        if isinstance(error, IdleTimeout):  # no byte for --upstream-idle-timeout: a stalled replica
            self.replica.eject("a stream stalled", kind="stalled", hold=True)
            failed = UpstreamFailed(f"replica {url} sent nothing for the idle timeout: {error}", timed_out=True)
        else:
            self.replica.wake.set()  # a dead replica is found (and ejected) by the next health check
            failed = UpstreamFailed(f"replica {url} stream broke: {error!r}")
        failed.__cause__ = error
        return failed

    @property
    def n_untaken(self) -> int:
        """Payloads read and not yet taken by the turn (at most about MAX_UNTAKEN)."""
        return len(self._payloads)

    # what Replica.open reads
    async def answered(self) -> Exception | None:
        """Wait for the status (a non-200 answer's whole body); the error if the connection broke first."""
        return await self._answer

    def error_text(self) -> str:
        return b"".join(self._error_body).decode(errors="replace")[:500]

    # the turn's side
    def _raise_unless_finished(self) -> None:
        """The response ended: fine after `data: [DONE]`, else why it did not finish."""
        if self._finished:
            return
        if self._error is not None:
            raise self._error
        if self._interrupted:
            raise shutting_down()
        raise UpstreamFailed(f"replica {self.replica.url} closed the stream before it finished")

    async def relay(self, sink: Sink[list[TokenChunk | Usage]]) -> None:
        """Hand every read's chunks to `sink` as they arrive, until the response ends (or
        `stop_relay()`); raises why it did not finish (a broken stream, an in-stream error, an
        interrupt) and whatever the sink raised."""
        loop = asyncio.get_running_loop()
        self._sink = sink
        try:
            while True:
                if self._payloads and self._hold is None and self._sink_error is None:  # read before the
                    self._deliver()  # relay began (maybe paused at MAX_UNTAKEN), or while it held
                    if self._hold is None:
                        self._resume_reading()
                if self._hold is not None:
                    hold, self._hold = self._hold, None
                    await hold
                    self._resume_reading()
                    continue
                if self._sink_error is not None:
                    raise self._sink_error
                if self._relay_stopped or (self._ended and not self._payloads):
                    break
                self._wake = loop.create_future()
                try:
                    await self._wake
                finally:
                    self._wake = None
        finally:
            self._sink = None
            if self._hold is not None and hasattr(self._hold, "close"):
                self._hold.close()  # what nobody will await now: a coroutine, or a hold closing its own
            self._hold = None
        if not self._relay_stopped:
            self._raise_unless_finished()

    def stop_relay(self) -> None:
        """The sink has all it wants (a stop string): `relay` returns after this read."""
        self._relay_stopped = True
        self._sink = None
        self._wake_relay()

    def _deliver(self) -> None:
        """Hand what was read to the sink, from the read's callback (or the relay, after a hold)."""
        payloads, self._payloads = self._payloads, []
        items, error = self._decode(payloads) if self.mode == "tokens" else (payloads, None)
        try:
            hold = self._sink(items) if items and self._sink is not None else None
        except Exception as exc:  # noqa: BLE001 - raised where the relay waits, in the request's task
            self._sink_error = exc
            self._wake_relay()
            return
        if hold is not None:  # what was handed on is written first, then the replica's error raised
            self._hold = hold
            self._paused = True
            if self.connection is not None:
                self.connection.pause()
        if error is not None:
            self._sink_error = error
        if hold is not None or error is not None:
            self._wake_relay()

    def _resume_reading(self) -> None:
        """What was held back (MAX_UNTAKEN, a hold) is taken: the connection reads again."""
        if self._paused:
            self._paused = False
            if self.connection is not None:
                self.connection.resume()

    def _decode(self, payloads: list[bytes]) -> tuple[list[TokenChunk | Usage], UpstreamFailed | None]:
        """One TokenChunk for the tokens of all `payloads`, then the Usage if one came; and the
        replica's in-stream error, if one came (what preceded it is still passed on).

        All payloads are parsed in one orjson call (as one JSON array); a choice without
        logprobs only adds its ids, so a token costs a few dict lookups and no object. The read
        engine pace brings, one event with one plain choice, is one chunk without the merge."""
        try:
            if len(payloads) == 1:
                event = orjson.loads(payloads[0])
                if type(event) is dict and (one := self._one_plain_choice(event)) is not None:
                    return [one], None  # what engine pace brings: one token of one choice
                events = [event]
            else:
                events = orjson.loads(b"[" + b",".join(payloads) + b"]")
        except orjson.JSONDecodeError:
            events = None
        if events is None or not all(isinstance(event, dict) for event in events):
            return self._decode_one_by_one(payloads)
        api = self.replica.api
        merged: TokenChunk | None = None
        usage: Usage | None = None
        try:
            for payload in events:
                if "error" in payload:
                    return self._with(merged, usage), self._mid_stream_error(payload["error"])
                for choice in payload.get("choices") or ():
                    if choice.get("logprobs") is None and merged is not None:
                        merged.token_ids += choice.get("token_ids") or ()
                        if (finish := choice.get("finish_reason")) is not None:
                            merged.finish_reason, merged.stop_reason = finish, choice.get("stop_reason")
                            merged.weight_versions = choice.get("weight_versions")
                    elif merged is None:
                        merged = parse_choice(api, choice)
                    else:
                        merged.extend(parse_choice(api, choice))
                if payload.get("usage"):
                    usage = parse_usage(payload)
                if payload.get("prompt_token_ids") is not None:
                    merged = parse_expansion(payload, merged)
        except (TypeError, KeyError, AttributeError, IndexError, ValueError):
            return self._decode_one_by_one(payloads)  # which one, and what preceded it
        return self._with(merged, usage), None

    @staticmethod
    def _one_plain_choice(event: dict) -> TokenChunk | None:
        """The chunk of an event with one choice, no logprobs, no usage and no error (else None)."""
        choices = event.get("choices")
        if type(choices) is not list or len(choices) != 1 or "error" in event or event.get("usage") or \
                event.get("prompt_token_ids") is not None:
            return None
        choice = choices[0]
        if type(choice) is not dict or choice.get("logprobs") is not None:
            return None
        ids = choice.get("token_ids")
        if type(ids) is not list:
            return None
        if (finish := choice.get("finish_reason")) is None:
            return TokenChunk(ids)
        return TokenChunk(ids, None, None, finish, choice.get("stop_reason"), choice.get("weight_versions"))

    def _decode_one_by_one(self, payloads: list[bytes]) -> tuple[list[TokenChunk | Usage], UpstreamFailed | None]:
        """`_decode` for a batch that did not parse whole: up to the malformed payload, and why."""
        api = self.replica.api
        merged: TokenChunk | None = None
        usage: Usage | None = None
        for data in payloads:
            try:
                payload = orjson.loads(data)
                if "error" in payload:
                    return self._with(merged, usage), self._mid_stream_error(payload["error"])
                for choice in payload.get("choices") or ():
                    chunk = parse_choice(api, choice)
                    if merged is None:
                        merged = chunk
                    else:
                        merged.extend(chunk)
                usage = parse_usage(payload) or usage
                if payload.get("prompt_token_ids") is not None:
                    merged = parse_expansion(payload, merged)
            except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:  # orjson's errors too
                self._fault = f"a malformed event: {exc!r}"
                return self._with(merged, usage), UpstreamFailed(
                    f"replica {self.replica.url} sent a malformed event {data[:200]!r}: {exc!r}")
        return self._with(merged, usage), None

    def _mid_stream_error(self, detail: object) -> UpstreamFailed:
        message = detail.get("message") if isinstance(detail, dict) else str(detail)
        self._fault = f"failed mid-stream: {message}"
        return UpstreamFailed(f"replica {self.replica.url} failed mid-stream: {message}")

    @staticmethod
    def _with(merged: TokenChunk | None, usage: Usage | None) -> list[TokenChunk | Usage]:
        items: list[TokenChunk | Usage] = [] if merged is None else [merged]
        if usage is not None:
            items.append(usage)
        return items

    def _wake_relay(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def interrupt(self) -> None:
        """Stop waiting for tokens: `relay` raises, and `aclose()` aborts upstream."""
        self._interrupted = True
        self.close_connection()
        self._ended = True
        self._wake_relay()

    async def aclose(self) -> None:
        """Close the connection and abort an unfinished generation, to the end even when the caller
        is cancelled meanwhile (a client leaving while we clean up): the abort runs shielded."""
        if self._closing is None:
            failure = self._failure()
            if failure is not None or self._finished:  # neither when the client left first
                self.replica.ended(failure)
            self.replica.inflight -= 1
            self.replica.streams.discard(self)
            self._payloads = []
            self._ended = True
            if self._finished:  # the connection goes back to the pool when the response's end is read
                self._closing = asyncio.get_running_loop().create_future()
                self._closing.set_result(None)
            else:
                self.close_connection()
                self._closing = asyncio.get_running_loop().create_task(self.replica.abort(self.request_id))
        await asyncio.shield(self._closing)

    def _failure(self) -> str | None:
        """Why the replica failed this request (for outlier detection); None when it did not (it
        finished, the client left first, or the gateway is shutting down)."""
        if self._interrupted:
            return None
        if self._error is not None or self._fault is not None:
            return str(self._error or self._fault)
        if self._finished or not self._ended:
            return None
        return "closed the stream before it finished"

    def close_connection(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            connection.close()  # vLLM aborts a generation whose connection closes

