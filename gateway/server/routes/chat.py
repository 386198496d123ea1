"""POST /v1/chat/completions over the same turn pipeline as the Responses API.

The prompt continues from exact earlier tokens when it can (gateway/pipeline/session.py):
ids the client put on the last assistant message, else the `rollout_id`'s trajectory,
else the `prompt_cache_key` session. A call with `rollout_id` is recorded in that rollout
once it finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.chat_input import parse_chat_request
from gateway.adapters.chat_output import chunks, completion, completions, sample_chunks
from gateway.adapters.responses import check_model
from gateway.adapters.rollout_fields import begin_rollout
from gateway.core.ids import new_id
from gateway.pipeline import session
from gateway.pipeline.request import TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.turn import Turn
from gateway.server.http import JSONResponse, cancelled_on_disconnect, read_json, sse_response
from gateway.sessions.rollouts import Pending


async def create_chat_completion(request: Request) -> Response:
    settings = request.app.state.settings
    body = await read_json(request, settings.max_body_bytes, settings.request_body_timeout)
    async with cancelled_on_disconnect(request):
        return await _complete(request.app.state.runtime, body)


async def _complete(runtime: Runtime, body: Any) -> Response:
    parsed = parse_chat_request(body)
    check_model(runtime, parsed.model)
    rollout = await begin_rollout(runtime, body)
    branches = None
    if rollout is not None and parsed.n > 1:  # each sample its own rollout, sharing the prompt
        branches = [await session.branch_rollout(runtime, rollout, body["rollout_id"], i) for i in range(parsed.n)]
        rollout = branches[0]
    turn_request = TurnRequest(parsed.conversation, parsed.sampling, cache_key=parsed.prompt_cache_key,
                               rollout=rollout, client_prefix=parsed.client_prefix,
                               spans=parsed.stream and parsed.logprobs)  # per-chunk logprobs
    turn = await session.prepare(runtime, turn_request)
    try:
        await turn.start()
        head = {"id": new_id("chatcmpl"), "created": int(time.time()), "model": parsed.model}
        if parsed.stream and parsed.n == 1:
            return sse_response(functools.partial(chunks, turn, parsed, head), cleanup=turn.aclose)
        if parsed.n > 1:
            turns = await _start_samples(runtime, turn, turn_request, branches or [rollout] * parsed.n)
            if parsed.stream:
                return sse_response(sample_chunks(turns, parsed, head, body.get("rollout_id")),
                                    cleanup=functools.partial(_close, turns))
            await _fan_out(turns)
            return JSONResponse(completions(turns, parsed, head, rollout_id=body.get("rollout_id")))
        async with contextlib.aclosing(turn.events()) as events:
            async for _ in events:
                pass
    except BaseException:
        await turn.aclose()
        raise
    await turn.aclose()
    if turn.record.finished:
        await session.commit(turn)
    return JSONResponse(completion(turn, parsed, head))


async def _start_samples(runtime: Runtime, first: Turn, turn_request: TurnRequest,
                         rollouts: list[Pending | None]) -> list[Turn]:
    """`n` generations of the same prompt (vLLM's prefix cache shares it), started: sample i is
    recorded in `rollouts[i]` (its branch of the rollout)."""
    turns = [first]
    try:
        for rollout in rollouts[1:]:
            turn = await session.prepare(runtime, dataclasses.replace(turn_request, rollout=rollout))
            await turn.start()
            turns.append(turn)
    except BaseException:
        await _close(turns)
        raise
    return turns


async def _fan_out(turns: list[Turn]) -> None:
    """Run the started samples to their ends, concurrently, and commit each. The session
    (`prompt_cache_key`) continues the first choice: that is the one a client continuing the
    conversation is assumed to keep."""
    try:
        await asyncio.gather(*(_drain(turn) for turn in turns))
    finally:
        await _close(turns)
    for sample, turn in enumerate(turns):
        if turn.record.finished:
            await session.commit(turn, sample=sample)


async def _close(turns: list[Turn]) -> None:
    for turn in turns:
        await turn.aclose()


async def _drain(turn: Turn) -> None:
    async with contextlib.aclosing(turn.events()) as events:
        async for _ in events:
            pass
