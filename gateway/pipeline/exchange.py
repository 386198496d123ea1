"""One exchange owns a turn: start → relay → commit or forget, written once for every API.

Routes and the WebSocket are thin: they parse a request and hand it to its API's builder
(gateway/adapters/responses/turn.py, gateway/adapters/turns.py), which makes it a `TurnRequest`
and has it prepared here in one call (`prepare`: the call's place in its rollout, each sample's
branch of it, the exact tokens the prompt continues and the replica affinity:
gateway/pipeline/session.py). A Responses body that continues stored state is read here with its
builder (`prepare_built`): the session it resends, its `conversation` or `previous_response_id` are
looked up here and handed to the builder, which finishes the request. The turn and a `Writer`
then go to `run`. Everything else about a turn's life happens here, in one
order, for Responses (HTTP JSON, SSE, WebSocket, background, compaction), Chat Completions,
Anthropic Messages and token-in alike:

0. The gate (gateway/pipeline/gate.py): a place in the server's budget of requests in flight and
   in its tenant's limits, before anything is rendered or sent; a 429 otherwise, answered by the
   writer as any failure before output. Every generating route runs here, so none can skip it.
1. `async with turn`: render and get a replica to accept the prompt. A failure there is before
   any output: the writer answers it (an HTTP error, or a failed response in-stream).
2. `writer.started`, then `turn.relay(writer.events)`: the item events of each upstream read go to
   the writer from the read itself.
3. Leaving the block, however (done, failed, the client gone, cancelled), closes the generation
   and aborts the replica's work if it is unfinished.
4. The one commit site: a turn that ended normally is recorded (session, rollout, stored
   response, WebSocket lane) before the writer's last events go out, so a client that continues
   at once finds it; anything else is forgotten, so a retry finds everything as it was.
5. The place at the gate is given back, the tokens of what ran counted against the tenant.

The exchange is the stores' one door for what a turn leaves behind (scripts/check_stores.py
holds everything under gateway/ to it): besides the commit and the forget of a turn it runs, a
WebSocket lane whose response could not even be made is forgotten here (`forget`), a turn
that generates nothing (`warm_up`) is remembered here, and a writer whose response is kept while
it runs (`Kept`: a background response) has its state stored here: queued once admitted or while
it waits in the gate's queue (`queue`), in progress once started, then failed or cancelled (a
completed one is the commit's).

A response made of several generations is several turns inside one exchange. A writer that
runs tools itself (`RunsTools`: remote MCP tools, gateway/adapters/responses/_mcp_tools.py) is asked after
each generation; when it ran some and the response goes on, the generation is recorded in its
rollout, if any, and the next turn continues the exact ids of the one before plus the rendered
outputs (gateway/pipeline/_tool_loop.py), entered in the same block; the last one is the one committed.

A writer's methods return what a transport's write does (`Hold`): None to go on, or an awaitable
(a slow client's drain) to wait for before more.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from gateway.core import tracing
from gateway.core.conversation import ToolOutput
from gateway.core.errors import APIError
from gateway.core.push import Hold, held
from gateway.formats.base import ParseEvent
from gateway.pipeline import _tool_loop as tool_loop
from gateway.pipeline import conversations, session, trace
from gateway.pipeline.gate import Pass
from gateway.pipeline.request import Builder, Found, Lane, RolloutCall, TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.turn import Turn
from gateway.tokenfix.record import TurnRecord

__all__ = ["Entering", "Kept", "Quiet", "ToolsRan", "forget", "prepare", "prepare_built", "prepare_samples",
           "queue", "release", "run", "run_samples", "warm_up"]


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


@dataclass(frozen=True, slots=True)
class ToolsRan:
    """What a writer's tools did after a generation: their outputs, in call order, and whether
    the response goes on with another generation (False: the client's turn; the outputs still
    follow the generation in the history)."""

    outputs: Sequence[ToolOutput]
    tool_calls: list[dict[str, Any]]  # one per call, for the next turn's record: server, name, seconds, error
    go_on: bool


@runtime_checkable
class RunsTools(Protocol):
    async def run_tools(self, turn: Turn) -> ToolsRan | None:
        """The generation `turn` ended: run the calls it made of the tools the gateway runs
        (their events written); None when it made none."""


@runtime_checkable
class Kept(Protocol):
    def state(self, *, cancelled: bool = False) -> dict[str, Any]:
        """The Response object as it stands, as GET answers it while the response runs (a
        background one): queued, in progress, failed once written so; `cancelled`: cancelled."""


async def prepare(runtime: Runtime, request: TurnRequest, rollout: RolloutCall | None = None) -> Turn:
    """The turn for `request` (not started), its call taken in `rollout`'s trajectory if it names one."""
    return (await prepare_samples(runtime, request, rollout, n=1))[0]


async def prepare_samples(runtime: Runtime, request: TurnRequest, rollout: RolloutCall | None, *, n: int
                          ) -> list[Turn]:
    """The `n` turns of one prompt (Chat Completions' `n`), each sample recorded in its own branch of
    `rollout`; sample i > 0 leaves only that branch behind (the session continues the first)."""
    pending = await session.begin_rollout(runtime, rollout.rollout_id, rollout.response_mask) if rollout else None
    rollouts = [pending] * n
    if rollout is not None and pending is not None and n > 1:  # each sample its own rollout, sharing the prompt
        rollouts = [await session.branch_rollout(runtime, pending, rollout.rollout_id, i) for i in range(n)]
    return [await session.prepare(runtime, dataclasses.replace(request, rollout=each, sample=i))
            for i, each in enumerate(rollouts)]


async def prepare_built(runtime: Runtime, builder: Builder) -> Turn:
    """The turn of a request whose body continues what the stores hold (Responses): what it
    resends or names looked up here, the request finished by its builder, then prepared as any."""
    request, rollout = await builder.request(await _found(runtime, builder))
    return await prepare(runtime, request, rollout)


async def _found(runtime: Runtime, builder: Builder) -> Found:
    """The session `builder`'s body resends whole, else what its body names."""
    key = builder.session_key
    resent = await session.recall(runtime, key, count=False) if key is not None else None
    # `resent` is still the session under `key` (nothing was awaited since): counted as a hit
    if key is not None and resent is not None and builder.resent(resent) and session.confirm(runtime, key, resent):
        return Found(resent=resent)
    named = builder.named()
    if named.conversation_id is not None:
        return Found(conversation=await conversations.load(runtime, named.conversation_id, param="conversation"))
    if named.previous_response_id is not None:
        return Found(previous=await session.previous_response(runtime, named.previous_response_id, named.cache))
    return Found()


Entering = asyncio.Future[Pass]  # a place at the gate, taken or being waited for


async def _admit(turn: Turn) -> Pass:
    """`turn`'s place at the gate, taken now (waiting in a full gateway's queue, if it has one)."""
    return await turn.runtime.gate.enter(turn.request)


async def queue(turn: Turn, writer: Writer) -> Entering:
    """`turn`'s place at the gate, for work that answers before it runs (a background response):
    refused now, if at all (a 429, before anything is stored), else taken at once or waited for in
    a full gateway's queue; either way a `Kept` writer's response is stored as queued before this
    returns. Hand what it returns to `run` (which awaits it) or to `release`."""
    queued: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def waits() -> None:
        if not queued.done():
            queued.set_result(None)

    entering = asyncio.ensure_future(turn.runtime.gate.enter(turn.request, waits))
    try:
        await asyncio.wait((entering, queued), return_when=asyncio.FIRST_COMPLETED)
        if entering.done():
            entering.result()  # refused: raised
        await _keep(turn, writer)
    except BaseException:
        await release(entering)
        raise
    return entering


async def release(entering: Entering) -> None:
    """A place from `queue` that `run` will not use (its task was cancelled before it ran): given
    back, or its wait in the queue ended."""
    if not entering.done():
        entering.cancel()
        with contextlib.suppress(asyncio.CancelledError, APIError):
            await entering
    elif not entering.cancelled() and entering.exception() is None:
        await entering.result().leave(())


async def warm_up(turn: Turn) -> int:
    """A turn that generates nothing (WebSocket `generate: false`): its conversation remembered
    for the next request (gateway/pipeline/session.py `warm_up`); the prompt's size."""
    return await session.warm_up(turn.runtime, turn.request)


def forget(lane: Lane) -> None:
    """A WebSocket response on `lane` failed before or outside its turn (a continuation that cannot
    be made, a crash): nothing may continue the lane's latest response (the spec's rule)."""
    session.forget(lane)


async def run(turn: Turn, writer: Writer, *, admitted: Pass | Entering | None = None) -> None:
    """Run `turn` to its end through `writer` (the steps above); `admitted`: its place at the gate,
    if `queue` took it already or waits for it (it is given back here all the same)."""
    await run_samples([turn], [writer], admitted=admitted)


async def run_samples(turns: Sequence[Turn], writers: Sequence[Writer], *,
                      admitted: Pass | Entering | None = None) -> None:
    """`n` turns of one prompt (Chat Completions' `n`): one place at the gate, all accepted before
    any output, then generated together, turn i written by writer i."""
    if (response_id := turns[0].request.response_id) is not None:
        trace.answered_as(response_id)
    entered = await _entered(turns[0], writers[0], admitted)
    if entered is None:
        return
    ran: list[TurnRecord] = [turn.record for turn in turns]
    try:
        await _run_admitted(turns, writers, ran)
    except asyncio.CancelledError:
        await _keep(turns[0], writers[0], cancelled=True)
        raise
    finally:
        await entered.leave(ran)


async def _entered(turn: Turn, writer: Writer, admitted: Pass | Entering | None) -> Pass | None:
    """The place at the gate, taken or awaited; None once a refusal is written. Over a budget
    nothing ran, so everything stays as it was (a lane's latest response too: the retry continues
    it); a kept response waiting in the queue is stored as failed, or cancelled."""
    if admitted is not None and not isinstance(admitted, asyncio.Future):
        return admitted
    try:
        return await (admitted if admitted is not None else _admit(turn))
    except APIError as exc:
        await held(writer.failed(turn, exc))
        await _keep(turn, writer)
        return None
    except asyncio.CancelledError:
        await _keep(turn, writer, cancelled=True)
        raise


async def _run_admitted(turns: Sequence[Turn], writers: Sequence[Writer], ran: list[TurnRecord]) -> None:
    async with contextlib.AsyncExitStack() as started:
        for turn, writer in zip(turns, writers, strict=True):
            try:
                await started.enter_async_context(turn)
            except APIError as exc:
                await _failed(turn, writer, exc)
                return
        ends = await _generate_all(turns, writers, started)
    for i, (writer, end) in enumerate(zip(writers, ends, strict=True)):
        if end is None:
            continue
        turn = end.turn
        ran[i] = turn.record  # the last generation of a tool loop: its prompt holds the ones before
        if writer.keeps and turn.record.finished:
            with tracing.phase("gateway.commit"):
                await session.commit(turn, end.answer, after=end.after)
        else:
            session.forget(turn.request.lane)
        await held(writer.ended(turn))


@dataclass(frozen=True, slots=True)
class _End:
    turn: Turn  # the response's last generation
    answer: dict[str, Any] | None
    after: Sequence[ToolOutput]  # outputs of tools run after it


async def _generate_all(turns: Sequence[Turn], writers: Sequence[Writer], started: contextlib.AsyncExitStack
                        ) -> list[_End | None]:
    if len(turns) == 1:
        return [await _generate(turns[0], writers[0], started)]
    try:
        async with asyncio.TaskGroup() as samples:  # one failing otherwise (a client gone) stops them all
            tasks = [samples.create_task(_generate(turn, writer, started)) for turn, writer in zip(turns, writers)]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None  # as one turn's would be (an HTTP error, the client gone)
    return [task.result() for task in tasks]


async def _generate(turn: Turn, writer: Writer, started: contextlib.AsyncExitStack) -> _End | None:
    """The started turn's output through `writer`, and the generations its tools' outputs
    continue into (each entered in `started`); how it ended, or None once the failure is written."""
    tools = writer if isinstance(writer, RunsTools) else None
    after: Sequence[ToolOutput] = ()
    try:
        await held(writer.started(turn))
        await _keep(turn, writer)
        while True:
            await turn.relay(writer.events)
            ran = await tools.run_tools(turn) if tools is not None else None
            if ran is None:
                break
            if not ran.go_on:
                after = ran.outputs
                break
            rollout = await session.commit_generation(turn)
            turn = await started.enter_async_context(tool_loop.following(turn, ran.outputs, ran.tool_calls, rollout))
    except APIError as exc:
        await _failed(turn, writer, exc)
        return None
    return _End(turn, writer.answer(turn), after)


async def _failed(turn: Turn, writer: Writer, exc: APIError) -> None:
    """A failed turn leaves nothing behind (of a kept response, its failure); the request's trace
    says why (an error the writer raises instead of writing is answered, and traced, as an HTTP error)."""
    session.forget(turn.request.lane)
    trace.failed(exc)
    await held(writer.failed(turn, exc))
    await _keep(turn, writer)


async def _keep(turn: Turn, writer: Writer | None, *, cancelled: bool = False) -> None:
    """A `Kept` writer's response stored as it stands (gateway/pipeline/session.py `store_snapshot`)."""
    if isinstance(writer, Kept):
        await session.store_snapshot(turn.runtime, turn.request, writer.state(cancelled=cancelled))


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
