"""vLLM's own extra request fields on Chat Completions, as RL frameworks send them to a stock
vLLM server: each is applied as vLLM applies it, or refused with a 400 that says why.

- `return_tokens_as_token_ids`: every logprobs `token` (chosen and alternatives) is
  `"token_id:N"`; unset, the server's `--return-tokens-as-token-ids` decides.
- `min_tokens`, `stop_token_ids`, `ignore_eos`: sampling, sent to the replica (the request's
  stop ids join the format's own; `ignore_eos` leaves only the request's, as vLLM does).
- `cache_salt`, `priority`: sent to the replica beside the sampling parameters.
- `skip_special_tokens: false` is refused: the gateway reads the model's special tokens as
  markup (reasoning, tool calls, the turn's end) and never returns them as text; the exact
  ids are what `return_token_ids` is for. `include_stop_str_in_output: true` with `stop` is
  refused likewise (the gateway matches stop strings and ends the turn before them); alone it
  changes nothing, as in vLLM (special stop tokens have no text). `prompt_logprobs` is refused:
  the gateway's replica stream carries no prompt logprobs (the token-in endpoints,
  `/v1/completions` and `/inference/v1/generate`, hand it to vLLM unchanged).

Types and ranges were checked with the body (gateway/adapters/request_schema.py).
"""

from __future__ import annotations

from gateway.adapters.request_schema import ChatBody
from gateway.core.errors import invalid_request
from gateway.core.sampling import SamplingOptions

__all__ = ["apply", "check_logprobs", "tokens_as_ids"]


def tokens_as_ids(body: ChatBody, *, server_default: bool) -> bool:
    """Whether logprobs `token`s are "token_id:N": the request says, else the server's flag."""
    as_ids = body.return_tokens_as_token_ids
    return server_default if as_ids is None else as_ids


def check_logprobs(body: ChatBody) -> None:
    """vLLM's rule: alternatives are asked for with `logprobs: true` (`top_logprobs: 0` is the
    sampled token's alone)."""
    if body.top_logprobs and not body.logprobs:
        raise invalid_request("'top_logprobs' needs 'logprobs': true (the alternatives come with each sampled "
                              "token's logprob).", param="top_logprobs", code="invalid_value")


def apply(body: ChatBody, sampling: SamplingOptions) -> None:
    """Put the fields the gateway sends on into `sampling`; 400 for those it cannot honour."""
    if body.skip_special_tokens is False:
        raise invalid_request("'skip_special_tokens': false is not supported: the gateway reads the model's special "
                              "tokens as markup (reasoning, tool calls, the end of the turn) and never returns them "
                              "as text. Ask for 'return_token_ids' to get the exact ids.",
                              param="skip_special_tokens", code="unsupported_value")
    if body.include_stop_str_in_output and body.stop:
        raise invalid_request("'include_stop_str_in_output' is not supported with 'stop': the gateway matches stop "
                              "strings itself and ends the turn before the token the match begins in.",
                              param="include_stop_str_in_output", code="unsupported_value")
    if body.prompt_logprobs is not None:
        raise invalid_request("'prompt_logprobs' is not supported on /v1/chat/completions: the gateway's replica "
                              "stream carries no prompt logprobs. /v1/completions and /inference/v1/generate pass "
                              "it to vLLM.", param="prompt_logprobs", code="unsupported_parameter")
    min_tokens, max_tokens = body.min_tokens, sampling.max_tokens
    if min_tokens is not None and max_tokens is not None and min_tokens > max_tokens:
        raise invalid_request(f"'min_tokens' ({min_tokens}) must be at most the maximum number of tokens "
                              f"({max_tokens}).", param="min_tokens", code="invalid_value")
    sampling.min_tokens = min_tokens or None
    sampling.stop_token_ids = tuple(body.stop_token_ids or ()) or None
    sampling.ignore_eos = body.ignore_eos or None
    sampling.cache_salt = body.cache_salt
    sampling.priority = body.priority
