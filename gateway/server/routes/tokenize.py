"""POST /tokenize and /detokenize, in vLLM's shapes (its server's root paths).

A conversation (`messages`) is answered with the prompt the gateway sends for it — exact
earlier tokens spliced in, or the prompt of the call that just generated from it — so a
client that asks vLLM for "the prompt of my last call" (NeMo-Gym's fallback) gets the ids the
model really saw. Plain text (`prompt`) is tokenized by a replica, as vLLM tokenizes it.
Ids are detokenized by the gateway's own tokenizer, special tokens included (as vLLM's do).
A loaded LoRA adapter's name is accepted as `model`, as vLLM accepts it: an adapter shares the
base model's tokenizer and chat template, so the answer is the base model's.
"""

from __future__ import annotations

from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.rollout_fields import rollout_call
from gateway.adapters.tokenize import parse_detokenize, parse_tokenize
from gateway.adapters.validation import check_model
from gateway.core.errors import APIError, UpstreamUnavailable
from gateway.pipeline import session
from gateway.pipeline.request import TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.server.http import JSONResponse, read_json

__all__ = ["detokenize", "tokenize"]


async def tokenize(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    body = await read_json(request, request.app.state.settings.max_body_bytes)
    parsed = parse_tokenize(body, runtime.model_name)
    if parsed.prompt is not None:
        check_model(runtime.model_name, body.get("model") or runtime.model_name, runtime.pool.adapters)
        return JSONResponse(await _replica_tokenize(runtime, parsed.prompt))
    chat = parsed.chat
    assert chat is not None
    check_model(runtime.model_name, chat.model, runtime.pool.adapters)
    call = rollout_call({"rollout_id": parsed.rollout_id}) if parsed.rollout_id else None
    rollout = await session.begin_rollout(runtime, call.rollout_id, None) if call is not None else None
    ids = list(await session.prompt_ids(runtime, TurnRequest(
        chat.conversation, chat.sampling, session_key=chat.prompt_cache_key, rollout=rollout,
        client_prefix=chat.client_prefix)))
    answer: dict[str, Any] = {"count": len(ids), "max_model_len": runtime.pool.max_model_len, "tokens": ids}
    if parsed.token_strs:
        answer["token_strs"] = [runtime.format.token_bytes(t).decode("utf-8", "replace") for t in ids]
    return JSONResponse(answer)


async def detokenize(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    body = await read_json(request, request.app.state.settings.max_body_bytes)
    tokens = parse_detokenize(body)
    check_model(runtime.model_name, body.get("model") or runtime.model_name, runtime.pool.adapters)
    return JSONResponse({"prompt": runtime.format.decode(tokens)})


async def _replica_tokenize(runtime: Runtime, body: dict[str, Any]) -> dict[str, Any]:
    """Text tokenized by a replica's /tokenize (the least busy one)."""
    replica = runtime.pool.pick()
    try:
        response = await runtime.pool.client.post(replica.url + "/tokenize", timeout=30.0,
                                                  json={"model": replica.served_model, **body})
    except httpx.HTTPError as exc:
        raise UpstreamUnavailable(f"replica {replica.url} did not tokenize: {exc!r}") from exc
    if response.status_code != 200:
        raise APIError(f"replica {replica.url} refused to tokenize ({response.status_code}): {response.text[:300]}",
                       status=502 if response.status_code >= 500 else response.status_code, code="upstream_error")
    return response.json()
