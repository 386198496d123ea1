"""POST /v1/responses/compact: a history in, its compacted window out (OpenAI's and Open
Responses' `CompactResource`; the endpoint Codex's remote compaction calls).

The body is a Responses body without the sampling options (`model`, `input`,
`previous_response_id`, `instructions`, `prompt_cache_key`, and the tools and reasoning
options Codex's compaction client may send). It runs as the same request
with a `compaction_trigger` appended (gateway/adapters/responses/compaction.py): one summary turn through
the ordinary exchange, continuing the session's exact tokens. The answer holds the history's user
messages, then the one `compaction` item that carries the summary.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.responses.compaction import TRIGGER, kept_messages
from gateway.adapters.responses.turn import from_http
from gateway.adapters.validation import parse_json
from gateway.core.errors import invalid_request
from gateway.pipeline import exchange
from gateway.server.http import JSONResponse, model_route

__all__ = ["compact_response"]

# A compact body: OpenAI's and Open Responses' fields, and what Codex's compaction client may add
# (its tools and reasoning options: kept, the summary turn's prompt then continues the session's).
_FIELDS = frozenset({"model", "input", "previous_response_id", "instructions", "prompt_cache_key", "service_tier",
                     "tools", "tool_choice", "parallel_tool_calls", "reasoning", "text"})
_HINTS = frozenset({"prompt_cache_retention", "prompt_cache_options"})  # caching hints: accepted, not needed here


async def _compact(request: Request, raw: bytes) -> Response:
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.")
    made = await from_http(request.app.state.runtime, orjson.dumps(_create_body(body)), request.app.state.settings)
    output = made.output()
    await exchange.run(made.turn, output)
    response = output.response()
    return JSONResponse({
        "id": response["id"],
        "object": "response.compaction",
        "created_at": response["created_at"],
        "output": [*kept_messages(made.parsed.conversation.items), *response["output"]],
        "usage": response["usage"],
    })


compact_response = model_route(_compact)


def _create_body(body: dict[str, Any]) -> dict[str, Any]:
    """The `response.create` body the compaction runs as."""
    unknown = sorted(set(body) - _FIELDS - _HINTS)
    if unknown:
        raise invalid_request(f"Unsupported parameter for /v1/responses/compact: '{unknown[0]}'.", param=unknown[0],
                              code="unsupported_parameter")
    raw_input = body.get("input")
    if isinstance(raw_input, str):
        raw_input = [{"type": "message", "role": "user", "content": raw_input}]
    items = raw_input if isinstance(raw_input, list) else [] if raw_input is None else raw_input
    if not isinstance(items, list):
        raise invalid_request("'input' must be a string or a list of items.", param="input")
    fields = {key: value for key, value in body.items() if key in _FIELDS}
    return {**fields, "input": [*items, {"type": TRIGGER}], "store": False}
