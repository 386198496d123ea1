"""POST /v1/completions and /inference/v1/generate: token-in traffic, passed through to a
replica as one exchange (gateway/pipeline/token_turn.py): routed, failed over, aborted when
the client leaves, limited and measured like every generation, recorded in its rollout."""

from __future__ import annotations

from functools import partial

from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.token_in import BodyWriter, EventsWriter, parse_token_in
from gateway.adapters.turns import token_in_turn
from gateway.adapters.validation import parse_json
from gateway.core.push import Sink
from gateway.pipeline import exchange
from gateway.pipeline.token_turn import COMPLETIONS, GENERATE
from gateway.server.http import model_route, sse_response

__all__ = ["create_completion", "generate"]

SESSION_HEADER = "x-session-id"


async def _forward(path: str, request: Request, raw: bytes) -> Response:
    runtime = request.app.state.runtime
    parsed = parse_token_in(parse_json(raw), path, model=runtime.model_name,
                            session=request.headers.get(SESSION_HEADER))
    turn = await token_in_turn(runtime, parsed, path)
    if parsed.stream:
        async def relay(emit: Sink[bytes]) -> None:
            await exchange.run(turn, EventsWriter(emit))
        return sse_response(relay)
    writer = BodyWriter()
    await exchange.run(turn, writer)
    return Response(writer.body, media_type="application/json")


create_completion = model_route(partial(_forward, COMPLETIONS))
generate = model_route(partial(_forward, GENERATE))
