"""What every API reports of a generation the same way: why it ended, its exact token ids, and
its deltas merged per read.

The Responses, Chat Completions and Anthropic writers each shape these in their own words;
the facts come from here, so they cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from gateway.formats.base import ItemDelta, ParseEvent
from gateway.pipeline.turn import Turn
from gateway.tokenfix.record import TurnRecord

__all__ = ["CONTEXT_WINDOW", "coalesce", "incomplete_reason", "nemo_fields", "token_fields"]

CONTEXT_WINDOW = "model_context_window_exceeded"


def incomplete_reason(turn: Turn) -> str:
    """What ended a generation vLLM stopped for length. `max_output_tokens` when an output
    limit did: the request's `max_output_tokens`, or the model's own limit (generation_config's
    `max_new_tokens`). When the context window did (prompt + output filled `max_model_len`;
    with no limit set, the gateway lets a turn use all the room left), OpenAI's schema has no
    value that says so (its enum is max_output_tokens | content_filter, and OpenAI itself files
    this case under max_output_tokens), so the gateway says what happened, in the words
    Anthropic's API uses for it: `model_context_window_exceeded`."""
    record = turn.record
    output = len(record.output_ids)
    limits = (turn.sampling.max_tokens, turn.runtime.defaults.max_tokens)
    if any(limit is not None and output >= limit for limit in limits):
        return "max_output_tokens"
    max_model_len = turn.runtime.pool.max_model_len
    if max_model_len is not None and record.input_tokens + output >= max_model_len:
        return CONTEXT_WINDOW
    return "max_output_tokens"


def token_fields(record: TurnRecord) -> dict[str, Any]:
    """Exact tokens, on request (`return_token_ids`): for RL and for checking on-policy prompts;
    `weight_versions`: which weights made which output token (vLLM's name and spans)."""
    return {
        "prompt_token_ids": record.prompt_token_ids,
        "output_token_ids": record.output_ids,
        "output_logprobs": record.logprobs,
        "weight_versions": record.weight_versions,
    }


def nemo_fields(record: TurnRecord) -> dict[str, Any]:
    """The same ids the way NeMo-RL / NeMo-Gym read them off a returned message or output item."""
    return {
        "prompt_token_ids": record.prompt_token_ids,
        "generation_token_ids": record.output_ids,
        "generation_log_probs": record.logprobs,
    }


def coalesce(events: list[ParseEvent]) -> list[ParseEvent]:
    """Consecutive deltas of one item as one delta: tokens read together make one event."""
    if len(events) < 2:
        return events
    merged: list[ParseEvent] = []
    run: list[ItemDelta] = []  # the deltas merged[-1] stands for
    for event in events:
        if type(event) is ItemDelta and run and merged[-1].index == event.index:
            run.append(event)
            continue
        if len(run) > 1:
            merged[-1] = _joined(run)
        merged.append(event)
        run = [event] if type(event) is ItemDelta else []
    if len(run) > 1:
        merged[-1] = _joined(run)
    return merged


def _joined(run: list[ItemDelta]) -> ItemDelta:
    first, last = run[0].span, run[-1].span
    span = (first[0], last[1]) if first is not None and last is not None else None
    return ItemDelta(run[0].index, "".join([delta.text for delta in run]), span)
