"""Request bodies and response decoding for stock vLLM's two token-level endpoints.

`generate`: POST /inference/v1/generate (needs `--enable-scale-out`): raw SamplingParams,
token ids in and out, generation-config defaults NOT applied (we always send them).
`completions`: POST /v1/completions with an integer prompt, on every stock replica:
`return_token_ids` gives the ids; logprobs come back keyed as "token_id:N".
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import orjson

from gateway.core.image import Image
from gateway.upstream.chunks import TokenChunk, Usage

__all__ = ["PATHS", "UpstreamAPI", "encode", "engine_request_id", "parse_choice", "parse_expansion", "parse_usage",
           "request_body"]

UpstreamAPI = Literal["generate", "completions"]

PATHS: dict[UpstreamAPI, str] = {
    "generate": "/inference/v1/generate",
    "completions": "/v1/completions",
}


# Fields that travel in `sampling` but are the request's own in GenerateRequest (top-level in
# CompletionRequest as well).
REQUEST_FIELDS = ("cache_salt", "priority", "kv_transfer_params")


def request_body(
    api: UpstreamAPI,
    *,
    model: str,
    prompt_ids: Sequence[int],
    sampling: dict[str, Any],
    request_id: str,
    stream: bool,
    images: Sequence[Image] = (),
) -> dict[str, Any]:
    """`sampling` holds SamplingParams fields (max_tokens, temperature, stop_token_ids, logprobs …).
    An int32 `array` of ids goes in as a numpy view: `encode` writes it without boxing each id.
    `images` (generate only) go as `content_parts`, in the order of their placeholders in the ids
    (one unexpanded placeholder each: vLLM's processor expands them)."""
    if isinstance(prompt_ids, array):
        prompt_ids = np.frombuffer(prompt_ids, dtype=np.int32)
    if api == "generate":
        params = {**sampling, "detokenize": False, "skip_special_tokens": False}
        body: dict[str, Any] = {
            "model": model,
            "token_ids": prompt_ids,
            "sampling_params": params,
            "request_id": request_id,
            "stream": stream,
        }
        for name in REQUEST_FIELDS:  # the request's, not SamplingParams'
            if name in params:
                body[name] = params.pop(name)
        if images:
            body["content_parts"] = [{"type": "image_url", "url": image.url} for image in images]
            body["return_token_ids"] = True  # the expanded prompt and `mm_placeholders`: a rollout keeps them
    else:
        body = {
            "model": model,
            "prompt": prompt_ids,
            **sampling,
            "stream": stream,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "request_id": request_id,
        }
        if sampling.get("logprobs") is not None:
            body["return_tokens_as_token_ids"] = True
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def encode(body: dict[str, Any]) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def engine_request_id(api: UpstreamAPI, request_id: str) -> str:
    """The id vLLM's engine knows the request by (what the abort endpoint wants)."""
    return f"generate-tokens-{request_id}" if api == "generate" else f"cmpl-{request_id}"


def parse_usage(payload: dict[str, Any]) -> Usage | None:
    usage = payload.get("usage")
    if not usage:
        return None
    details = usage.get("prompt_tokens_details") or {}
    return Usage(
        prompt_tokens=usage.get("prompt_tokens", 0),
        completion_tokens=usage.get("completion_tokens", 0),
        cached_tokens=details.get("cached_tokens"),
    )


def parse_expansion(payload: dict[str, Any], into: TokenChunk | None) -> TokenChunk:
    """`into` (a chunk for none if None) with the expanded prompt ids and `mm_placeholders` of
    generate's first event (`return_token_ids`)."""
    chunk = into if into is not None else TokenChunk([])
    chunk.expanded_prompt, chunk.mm_placeholders = payload["prompt_token_ids"], payload.get("mm_placeholders")
    return chunk


def parse_choice(api: UpstreamAPI, choice: dict[str, Any]) -> TokenChunk:
    token_ids = choice.get("token_ids") or []
    logprobs, top = (_generate_logprobs if api == "generate" else _completion_logprobs)(choice.get("logprobs"))
    return TokenChunk(
        token_ids=token_ids,
        logprobs=logprobs,
        top_logprobs=top,
        finish_reason=choice.get("finish_reason"),
        stop_reason=choice.get("stop_reason"),
        weight_versions=choice.get("weight_versions"),
    )


def _generate_logprobs(raw: dict[str, Any] | None):
    if not raw or raw.get("content") is None:
        return None, None
    content = raw["content"]
    logprobs = [entry["logprob"] for entry in content]
    top = None
    if any(entry.get("top_logprobs") for entry in content):
        top = [[(t["token_id"], t["logprob"]) for t in entry.get("top_logprobs") or ()] for entry in content]
    return logprobs, top


def _completion_logprobs(raw: dict[str, Any] | None):
    if not raw or raw.get("token_logprobs") is None:
        return None, None
    logprobs = [lp if lp is not None else 0.0 for lp in raw["token_logprobs"]]
    top = None
    if raw.get("top_logprobs"):
        top = [
            [(int(key.rpartition(":")[2]), value) for key, value in (entry or {}).items()]
            for entry in raw["top_logprobs"]
        ]
    return logprobs, top
