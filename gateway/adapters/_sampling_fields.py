"""The sampling fields Responses and Chat Completions share, read into `SamplingOptions`.

Both APIs accept vLLM's extra sampling parameters (top_k, min_p, repetition_penalty) as
vLLM's own OpenAI server does; only the length field and what turns logprobs on differ.
Types and ranges were checked with the body (gateway/adapters/request_schema.py).
"""

from __future__ import annotations

from gateway.adapters.request_schema import RequestBody
from gateway.core.sampling import SamplingOptions
from gateway.core.service_tier import served_tier

__all__ = ["parse_sampling"]


def parse_sampling(body: RequestBody, *, max_tokens: int | None, logprobs: bool,
                   logit_bias: dict[str, float] | None = None) -> SamplingOptions:
    """`logprobs`: the API's own fields asked for the sampled tokens' logprobs (the top
    `top_logprobs` alternatives come with them). `logit_bias`: Chat's `{"token id": bias}`."""
    return SamplingOptions(
        max_tokens=max_tokens, temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
        min_p=body.min_p, seed=body.seed, presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty, repetition_penalty=body.repetition_penalty,
        logprobs=(body.top_logprobs or 0) if logprobs else None,
        logit_bias={int(token): bias for token, bias in logit_bias.items()} if logit_bias else None,
        tier=served_tier(body.service_tier),
    )
