"""The sampling fields Responses and Chat Completions share, read into `SamplingOptions`.

Both APIs accept vLLM's extra sampling parameters (top_k, min_p, repetition_penalty) as
vLLM's own OpenAI server does; only the length field and what turns logprobs on differ.
Types and ranges were checked with the body (gateway/adapters/request_schema.py).
"""

from __future__ import annotations

from typing import Any

from gateway.adapters.validation import expect, invalid_request
from gateway.core.sampling import SamplingOptions

__all__ = ["parse_sampling"]


def parse_sampling(body: dict[str, Any], *, max_tokens: int | None, logprobs: bool) -> SamplingOptions:
    """`logprobs`: the API's own fields asked for the sampled tokens' logprobs (the top
    `top_logprobs` alternatives come with them)."""
    get = body.get
    return SamplingOptions(
        max_tokens=max_tokens, temperature=get("temperature"), top_p=get("top_p"), top_k=get("top_k"),
        min_p=get("min_p"), seed=get("seed"), presence_penalty=get("presence_penalty"),
        frequency_penalty=get("frequency_penalty"), repetition_penalty=get("repetition_penalty"),
        logprobs=(get("top_logprobs") or 0) if logprobs else None,
        logit_bias=_logit_bias(body.get("logit_bias")),
    )


def _logit_bias(raw: Any) -> dict[int, float] | None:
    """OpenAI's `{"token id": bias}`, bias in [-100, 100]; the ids are the served model's."""
    raw = expect(raw, dict, "logit_bias")
    if not raw:
        return None
    bias: dict[int, float] = {}
    for key, value in raw.items():
        param = f"logit_bias.{key}"
        try:
            token = int(key)
        except ValueError:
            raise invalid_request(f"'{param}': keys must be token ids.", param=param) from None
        if token < 0 or isinstance(value, bool) or not isinstance(value, int | float) or not -100 <= value <= 100:
            raise invalid_request(f"'{param}' must be a token id with a bias from -100 to 100.", param=param)
        bias[token] = float(value)
    return bias
