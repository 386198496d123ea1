"""One request's trace: where its turn's record and its error answer are written down.

A `Trace` spans one request (an HTTP POST to a generation route, or one `response.create`
on a WebSocket) and lives in a context variable, so the code serving it reports without
passing it around: the session module `attach`es the turn's record, a transport that
answers with an error event calls `error`. gateway/server/_observe.py opens traces and,
when one ends, reads them into the metrics and the access log.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from gateway.core.errors import APIError
from gateway.tokenfix.record import TurnRecord

__all__ = ["Trace", "answered_as", "attach", "current", "error", "failed"]


@dataclass(eq=False, slots=True)
class Trace:
    api: str
    request_id: str
    received: float  # time.perf_counter() when the request arrived
    record: TurnRecord | None = None
    status: int = 200  # the HTTP status answered, or the status of a WebSocket error event
    cancelled: bool = False  # the client left (or the server shut the socket) before the end
    error_code: str | None = None  # what the client was told went wrong, if anything
    error_message: str | None = None
    tenant: str | None = None  # whose API key the request came with (gateway/core/tenancy.py)
    response_id: str | None = None  # the id the client knows the answer by (resp_…, chatcmpl-…, msg_…)

    @property
    def outcome(self) -> str:
        """completed | incomplete | failed | cancelled, or the status of an error answer."""
        if self.status >= 400:
            return str(self.status)
        record = self.record
        if record is not None and record.ended_early is not None:  # a failure, or the client left
            return record.ended_early
        if self.cancelled:
            return "cancelled"
        if record is None:  # nothing to generate (a WebSocket `generate: false` warmup)
            return "completed"
        if record.replica is None:  # refused before it was sent, answered in-stream (context length)
            return "failed"
        if record.finish_reason is None:  # accepted, but the client left before the events were read
            return "cancelled"
        if record.finish_reason in ("length", "steered"):
            return "incomplete"
        return "failed" if record.finish_reason == "abort" else "completed"


current: ContextVar[Trace | None] = ContextVar("trace", default=None)


def attach(record: TurnRecord) -> None:
    """Make `record` the one the current request is measured by."""
    if (trace := current.get()) is not None:
        trace.record = record


def answered_as(response_id: str) -> None:
    """The current request's answer has this id (its span's `gen_ai.response.id`)."""
    if (trace := current.get()) is not None:
        trace.response_id = response_id


def error(exc: APIError) -> None:
    """The current request was answered with `exc` (an HTTP error, a WebSocket error event)."""
    if (trace := current.get()) is not None:
        trace.status = exc.status
        trace.error_code, trace.error_message = exc.code or exc.type, str(exc)  # a replica's failure in detail


def failed(exc: APIError) -> None:
    """The current response failed with `exc`, told in-stream (`response.failed`)."""
    if (trace := current.get()) is not None:
        trace.error_code, trace.error_message = exc.code or exc.type, str(exc)
