"""What a generation's record says about it, as OpenTelemetry GenAI span attributes.

The names are the GenAI semantic conventions' (`gen_ai.*`): the operation, the model, the
sampling parameters sent upstream, token usage, why it finished; TTFT under vLLM's own name
for it (`gen_ai.latency.time_to_first_token`, seconds from the span's start). Read once, when a
span ends, from the record the turn wrote anyway: nothing is counted per token for it. Never
prompt or output text (gateway/core/tracing.py's `capture_content` decides that, elsewhere).
"""

from __future__ import annotations

from typing import Any

from gateway.tokenfix.record import TurnRecord

OPERATION = "chat"  # gen_ai.operation.name of every generating API (Responses, Chat, Messages)

# Sampling parameters as sent upstream (vLLM's names) → their GenAI attribute.
_SAMPLING = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "max_tokens": "gen_ai.request.max_tokens",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "seed": "gen_ai.request.seed",
    "n": "gen_ai.request.choice.count",
}


def request_attributes(record: TurnRecord) -> dict[str, Any]:
    """The model and sampling a generation was asked for (known once it is prepared)."""
    attributes: dict[str, Any] = {"gen_ai.operation.name": OPERATION, "gen_ai.request.model": record.model}
    params = record.upstream_params or {}
    for name, attribute in _SAMPLING.items():
        value = params.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attributes[attribute] = value
    stop = params.get("stop")
    if stop:
        attributes["gen_ai.request.stop_sequences"] = [stop] if isinstance(stop, str) else [str(s) for s in stop]
    return attributes


def result_attributes(record: TurnRecord, started: float | None) -> dict[str, Any]:
    """What the generation did: usage, finish reason, the replica, and TTFT counted from
    `started` (a time.perf_counter()) — set when the span ends."""
    attributes: dict[str, Any] = {"gen_ai.usage.output_tokens": len(record.output_ids)}
    if record.replica is not None:
        attributes["gen_ai.usage.input_tokens"] = record.input_tokens
        attributes["gateway.cached_input_tokens"] = record.cached_tokens
        attributes["gateway.replica"] = record.replica
        attributes["gateway.upstream_request_id"] = record.request_id
    if record.finish_reason is not None:
        attributes["gen_ai.response.finish_reasons"] = [record.finish_reason]
    if record.first_token_at is not None and started is not None:
        attributes["gen_ai.latency.time_to_first_token"] = round(record.first_token_at - started, 6)
    attributes["gateway.spliced"] = record.spliced
    if record.attempts > 1:
        attributes["gateway.upstream_retries"] = record.attempts - 1
    return attributes
