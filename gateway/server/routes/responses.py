"""POST /v1/responses over HTTP: JSON, or an SSE stream of Responses events.

Codex sends the whole history on every request, keyed by `prompt_cache_key`: the exact
tokens of the session's previous turn are kept under that key and spliced into the
next prompt (gateway/tokenfix), and the key pins the session to one replica. RL
clients may send `rollout_id` (and `response_mask`) as extra top-level fields: the
call is then recorded in that rollout's trajectory, as over Chat Completions.
The turn is built as over WebSocket (gateway/adapters/responses/turn.py) and run by the
exchange (gateway/pipeline/exchange.py).
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.responses.events import Event
from gateway.adapters.responses.turn import from_http
from gateway.adapters.validation import parse_json
from gateway.core.errors import invalid_request
from gateway.core.push import Hold, Sink
from gateway.pipeline import exchange
from gateway.server.http import JSONResponse, model_route, sse_event, sse_response
from gateway.server.routes.stored_responses import run_in_background

__all__ = ["count_input_tokens", "create_response", "sse_sink"]

# OpenAI's `TokenCountsBody` (POST /responses/input_tokens in its OpenAPI description), and the
# `prompt_cache_key` a session is kept under here; `personality` is accepted and has no effect.
_COUNT_FIELDS = frozenset({"model", "input", "instructions", "previous_response_id", "conversation", "tools",
                           "tool_choice", "parallel_tool_calls", "reasoning", "text", "truncation",
                           "prompt_cache_key"})
_COUNT_IGNORED = frozenset({"personality"})


async def _create(request: Request, raw: bytes) -> Response:
    made = await from_http(request.app.state.runtime, raw, request.app.state.settings)
    if made.parsed.background:
        return await run_in_background(made)
    if made.parsed.stream:
        async def relay(sink: Sink[bytes]) -> None:
            await exchange.run(made.turn, made.output(sse_sink(sink)))
        return sse_response(relay)
    output = made.output()
    await exchange.run(made.turn, output)
    return JSONResponse(output.response())


create_response = model_route(_create)


async def _count(request: Request, raw: bytes) -> Response:
    """POST /v1/responses/input_tokens: `{"object": "response.input_tokens", "input_tokens": N}`,
    N the length of the prompt POST /v1/responses would send for this body — the session's exact
    tokens spliced in as they would be, each image as vLLM expands it — and nothing sent."""
    runtime = request.app.state.runtime
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.")
    unknown = sorted(set(body) - _COUNT_FIELDS - _COUNT_IGNORED)
    if unknown:
        raise invalid_request(f"Unsupported parameter for /v1/responses/input_tokens: '{unknown[0]}'.",
                              param=unknown[0], code="unsupported_parameter")
    if "model" not in body or _COUNT_IGNORED & set(body):  # `model` is optional here
        raw = orjson.dumps({"model": runtime.model_name, **{k: v for k, v in body.items() if k in _COUNT_FIELDS}})
    made = await from_http(runtime, raw, request.app.state.settings)
    return JSONResponse({"object": "response.input_tokens", "input_tokens": await made.turn.measure()})


count_input_tokens = model_route(_count)


def sse_sink(sink: Sink[bytes]) -> Sink[list[Event]]:
    """Responses events as SSE into `sink`: one write for the events of one upstream read."""
    def write(events: list[Event]) -> Hold:
        return sink(sse_event(events[0]) if len(events) == 1 else b"".join([sse_event(event) for event in events]))
    return write
