"""POST /v1/chat/completions over the same exchange as the Responses API.

The route parses the body and hands it to its builder (gateway/adapters/turns.py), which the
exchange prepares; the prompt continues from exact earlier tokens when it can (gateway/pipeline/session.py):
ids the client put on the last assistant message, else the `rollout_id`'s trajectory,
else the `prompt_cache_key` session. A call with `rollout_id` is recorded in that rollout
once it finishes; with `n` > 1, each sample in its own branch of it.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.chat.input import parse_chat_request, unwrap_extra_body
from gateway.adapters.chat.output import ChatChunks, completion, completions, samples_ending
from gateway.adapters.turns import chat_turns
from gateway.adapters.validation import parse_json
from gateway.core.ids import new_id
from gateway.core.push import Sink, held
from gateway.pipeline import exchange, session, trace
from gateway.server.http import JSONResponse, model_route, sse_response

__all__ = ["create_chat_completion"]


async def _complete(request: Request, raw: bytes) -> Response:
    runtime = request.app.state.runtime
    body: Any = unwrap_extra_body(parse_json(raw))
    parsed = parse_chat_request(body, tokens_as_ids=runtime.tokens_as_ids)
    turns = await chat_turns(runtime, body, parsed)
    rollout_id = body.get("rollout_id")
    head = {"id": new_id("chatcmpl"), "created": int(time.time()), "model": parsed.model}
    if body.get("service_tier") is not None:  # OpenAI's rule: the tier that served it, once one was asked for
        head["service_tier"] = parsed.sampling.tier
    trace.answered_as(head["id"])
    if parsed.stream and parsed.n == 1:
        async def relay(sink: Sink[bytes]) -> None:
            await exchange.run(turns[0], ChatChunks(parsed, head, sink))
        return sse_response(relay)
    if parsed.stream:
        async def relay_samples(sink: Sink[bytes]) -> None:
            branch = [session.branch_id(rollout_id, i) if rollout_id is not None else None for i in range(parsed.n)]
            await exchange.run_samples(turns, [ChatChunks(parsed, head, sink, index=i, rollout_id=branch[i])
                                               for i in range(parsed.n)])
            await held(sink(samples_ending(turns, parsed, head)))
        return sse_response(relay_samples)
    await exchange.run_samples(turns, [exchange.Quiet() for _ in turns])
    if parsed.n == 1:
        return JSONResponse(completion(turns[0], parsed, head))
    return JSONResponse(completions(turns, parsed, head, rollout_id=rollout_id))


create_chat_completion = model_route(_complete)
