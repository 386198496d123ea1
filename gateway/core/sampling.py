"""Sampling parameters: the request's values over the model's generation_config defaults.

vLLM's generate endpoint does not apply generation_config.json, so the gateway resolves
every value itself and sends them explicitly — the same on both upstream endpoints.
That includes `max_new_tokens`, which vLLM's own endpoints treat as a server-wide output
limit: no request generates more, and a request that sets no limit gets that one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from gateway.core.service_tier import Tier

__all__ = ["GenerationDefaults", "OutputConstraint", "SamplingOptions", "resolve"]

log = logging.getLogger(__name__)

# generation_config.json keys that map 1:1 onto vLLM SamplingParams.
_DEFAULT_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


@dataclass(frozen=True, slots=True)
class OutputConstraint:
    """What the output must be, beyond sampling: enforced by vLLM's structured outputs in the
    model's own output format (`ChatFormat.structured_outputs`)."""

    tool_choice: str = "auto"  # auto | required | a function's name (none: no tools are offered)
    allowed_tools: tuple[str, ...] | None = None  # calls limited to these names (allowed_tools)
    parallel_tool_calls: bool = True  # False: the generation ends after its first call
    answer_schema: dict[str, Any] | None = None  # a text answer is JSON of this schema (json_schema/json_object)
    max_tool_calls: int | None = None  # the generation ends after this many calls

    @property
    def active(self) -> bool:
        return (self.tool_choice != "auto" or self.allowed_tools is not None or self.max_calls is not None
                or self.answer_schema is not None)

    @property
    def max_calls(self) -> int | None:
        """How many calls one generation may make (None: any number)."""
        return 1 if not self.parallel_tool_calls else self.max_tool_calls


@dataclass(slots=True)
class SamplingOptions:
    """What a client asked for; None means "use the model's default"."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logprobs: int | None = None  # None: no logprobs; 0: the sampled token's; k: plus top-k
    stop: tuple[str, ...] | None = None  # Chat stop strings (the gateway matches them: not sent)
    logit_bias: dict[int, float] | None = None  # token id -> bias (the ids are the model's: passed through)
    constraint: OutputConstraint | None = None  # forced/structured output (not a SamplingParams field)
    # vLLM's extra fields, sent on as its own server would apply them
    min_tokens: int | None = None
    stop_token_ids: tuple[int, ...] | None = None  # stop ids beyond the format's own
    ignore_eos: bool | None = None  # the format's stop ids and EOS do not end the generation
    cache_salt: str | None = None  # request-level, not SamplingParams: sent beside them
    priority: int | None = None  # likewise; None: the service tier's, shared fairly (gateway/core/service_tier.py)
    tier: Tier = "default"  # the service tier the request is served with (not sent: it sets the priority)


@dataclass(slots=True)
class GenerationDefaults:
    values: dict[str, Any] = field(default_factory=dict)
    eos_token_ids: list[int] = field(default_factory=list)
    max_tokens: int | None = None  # generation_config's max_new_tokens: the output limit of every request

    @classmethod
    def load(cls, model: str | Path) -> GenerationDefaults:
        """Read generation_config.json from a local dir or the HF cache (offline-friendly)."""
        from transformers import GenerationConfig

        try:
            config = GenerationConfig.from_pretrained(str(model))
        except (OSError, ValueError) as exc:
            log.info("no generation_config for %s (%s); using vLLM's neutral defaults", model, exc)
            return cls()
        raw = config.to_diff_dict()
        values = {key: raw[key] for key in _DEFAULT_KEYS if raw.get(key) is not None}
        eos = raw.get("eos_token_id")
        eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        if raw.get("do_sample") is False:
            values["temperature"] = 0.0
        max_new_tokens = raw.get("max_new_tokens")
        return cls(values=values, eos_token_ids=eos_ids,
                   max_tokens=max_new_tokens if isinstance(max_new_tokens, int) and max_new_tokens > 0 else None)


_NOT_SENT_AS_IS = frozenset({"max_tokens", "logprobs", "constraint", "stop", "stop_token_ids", "ignore_eos",
                             "tier"})


def resolve(options: SamplingOptions, defaults: GenerationDefaults, *, max_tokens: int,
            stop_token_ids: list[int]) -> dict[str, Any]:
    """SamplingParams for vLLM: explicit request values win over model defaults."""
    params: dict[str, Any] = dict(defaults.values)
    for f in fields(SamplingOptions):
        value = getattr(options, f.name)
        if value is not None and f.name not in _NOT_SENT_AS_IS:
            params[f.name] = value
    params["max_tokens"] = min(max_tokens, defaults.max_tokens) if defaults.max_tokens else max_tokens
    extra = list(options.stop_token_ids or ())
    if options.ignore_eos:  # vLLM's rule: only the request's own stop ids still stop it
        params["ignore_eos"] = True
        params["stop_token_ids"] = extra
    else:
        params["stop_token_ids"] = [*stop_token_ids, *(t for t in extra if t not in stop_token_ids)]
    if options.logprobs is not None:
        params["logprobs"] = options.logprobs
    if options.logit_bias is not None:  # JSON object keys are strings; vLLM reads them back as ids
        params["logit_bias"] = {str(token): bias for token, bias in options.logit_bias.items()}
    return params
