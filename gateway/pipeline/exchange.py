"""One exchange owns a turn: start → relay → commit or forget, written once for every API.

Routes and the WebSocket are thin: they parse a request into a `Turn` (gateway/pipeline/session.py
`prepare`) and hand it, with a `Writer`, to `run`. Everything else about a turn's life happens
here, in one order, for Responses (HTTP JSON, SSE, WebSocket, background, compaction), Chat
Completions and Anthropic Messages alike:

1. `async with turn`: render and get a replica to accept the prompt. A failure there is before
   any output: the writer answers it (an HTTP error, or a failed response in-stream).
2. `writer.started`, then `turn.relay(writer.events)`: the item events of each upstream read go to
   the writer from the read itself.
3. Leaving the block, however (done, failed, the client gone, cancelled), closes the generation
   and aborts the replica's work if it is unfinished.
4. The one commit site: a turn that ended normally is recorded (session, rollout, stored
   response, WebSocket lane) before the writer's last events go out, so a client that continues
   at once finds it; anything else is forgotten, so a retry finds everything as it was.

A writer's methods return what a transport's write does (`Hold`): None to go on, or an awaitable
(a slow client's drain) to wait for before more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any, Protocol

from gateway.core import tracing
from gateway.core.errors import APIError
from gateway.core.push import Hold, held
from gateway.formats.base import ParseEvent
from gateway.pipeline import session, trace
from gateway.pipeline.turn import Turn


class Writer(Protocol):
    """An API's answer to one turn, written as the turn goes (Responses events, chat chunks,
    Messages events), or collected for a JSON answer."""

    keeps: bool  # whether what the turn generated becomes history (a compaction summary does not)

    def started(self, turn: Turn) -> Hold:
        """The turn was accepted by a replica; nothing was generated yet."""

    def events(self, events: list[ParseEvent]) -> Hold:
        """The item events of one upstream read."""

    def answer(self, turn: Turn) -> dict[str, Any] | None:
        """The generation ended: the answer kept with a stored response (the Response object), if any."""

    def ended(self, turn: Turn) -> Hold:
        """The answer's last events, once what the turn leaves behind is recorded."""

    def failed(self, turn: Turn, error: APIError) -> Hold:
        """The turn failed, before `started` (nothing written yet) or after: written as the API
        says, or raised (an HTTP error) when the API answers it so."""


async def run(turn: Turn, writer: Writer) -> None:
    """Run `turn` to its end through `writer` (the steps above)."""
    await run_samples([turn], [writer])


async def run_samples(turns: Sequence[Turn], writers: Sequence[Writer]) -> None:
    """`n` turns of one prompt (Chat Completions' `n`): all accepted before any output, then
    generated together, turn i written by writer i."""
    if (response_id := turns[0].request.response_id) is not None:
        trace.answered_as(response_id)
    async with contextlib.AsyncExitStack() as started:
        for turn, writer in zip(turns, writers, strict=True):
            try:
                await started.enter_async_context(turn)
            except APIError as exc:
                _forget(turn, exc)
                await held(writer.failed(turn, exc))
                return
        answers = await _generate_all(turns, writers)
    for turn, writer, answer in zip(turns, writers, answers, strict=True):
        if answer is _FAILED:
            continue
        if writer.keeps and turn.record.finished:
            with tracing.phase("gateway.commit"):
                await session.commit(turn, answer)
        else:
            session.forget(turn.request)
        await held(writer.ended(turn))


_FAILED: Any = object()  # a turn whose failure its writer has answered already


async def _generate_all(turns: Sequence[Turn], writers: Sequence[Writer]) -> list[Any]:
    if len(turns) == 1:
        return [await _generate(turns[0], writers[0])]
    try:
        async with asyncio.TaskGroup() as samples:  # one failing otherwise (a client gone) stops them all
            tasks = [samples.create_task(_generate(turn, writer)) for turn, writer in zip(turns, writers)]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None  # as one turn's would be (an HTTP error, the client gone)
    return [task.result() for task in tasks]


async def _generate(turn: Turn, writer: Writer) -> Any:
    """The started turn's output through `writer`; its answer, or _FAILED once the failure is written."""
    try:
        await held(writer.started(turn))
        await turn.relay(writer.events)
    except APIError as exc:
        _forget(turn, exc)
        await held(writer.failed(turn, exc))
        return _FAILED
    return writer.answer(turn)


def _forget(turn: Turn, exc: APIError) -> None:
    """A failed turn leaves nothing behind; the request's trace says why (an error the writer
    raises instead of writing is answered, and traced, as an HTTP error)."""
    session.forget(turn.request)
    trace.failed(exc)


class Quiet:
    """The writer of an answer made once the turn ended (a JSON body): writes nothing as it
    goes; a failure is raised (an HTTP error)."""

    keeps = True

    def started(self, turn: Turn) -> Hold:
        return None

    def events(self, events: list[ParseEvent]) -> Hold:
        return None

    def answer(self, turn: Turn) -> None:
        return None

    def ended(self, turn: Turn) -> Hold:
        return None

    def failed(self, turn: Turn, error: APIError) -> Hold:
        raise error
