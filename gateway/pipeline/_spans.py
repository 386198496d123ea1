"""What a generation's record says about it, as OpenTelemetry GenAI span attributes.

The names are the GenAI semantic conventions' (`gen_ai.*`): the operation, the model, the
sampling parameters sent upstream, token usage, why it finished; TTFT under vLLM's own name
for it (`gen_ai.latency.time_to_first_token`, seconds from the span's start). They are on the
generation's span only, none repeated on the request's: each attribute costs the exporter a
microsecond or two to encode, and none is built for a span the sampler left out.
Read once, when the span ends, from the record the turn wrote anyway, and set in one dict:
nothing is counted per token for it. A list-valued attribute is a tuple (what the SDK stores
and exporters expect). Prompt and output text only with `tracing.capture_content` (an explicit flag): then the history as
`gen_ai.input.messages` and the generated ids decoded as `gen_ai.output.messages`.
"""

from __future__ import annotations

import functools
import time
from typing import Any
from urllib.parse import urlsplit

import orjson
from opentelemetry.trace import Span, SpanKind

from gateway.core import tracing
from gateway.core.conversation import Message, Reasoning, ToolCall, ToolOutput
from gateway.formats.base import ChatFormat
from gateway.tokenfix.record import TurnRecord

__all__ = ["Generation", "end_generation", "open_generation"]

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
        attributes["gen_ai.request.stop_sequences"] = (stop,) if isinstance(stop, str) else tuple(str(s) for s in stop)
    return attributes


def result_attributes(record: TurnRecord, started: float) -> dict[str, Any]:
    """What the generation did: usage, finish reason, vLLM's id for it, and TTFT counted from
    `started` (a time.perf_counter()) — set when the span ends."""
    attributes: dict[str, Any] = {"gen_ai.usage.output_tokens": len(record.output_ids),
                                  "gen_ai.response.id": record.request_id}
    if record.replica is not None:
        attributes["gen_ai.usage.input_tokens"] = record.input_tokens
        if record.cached_tokens:
            attributes["gen_ai.usage.cache_read.input_tokens"] = record.cached_tokens
    if record.finish_reason is not None:
        attributes["gen_ai.response.finish_reasons"] = (record.finish_reason,)
    if record.first_token_at is not None:
        attributes["gen_ai.latency.time_to_first_token"] = round(record.first_token_at - started, 6)
    if record.spliced:
        attributes["gateway.spliced"] = True
    if record.attempts > 1:
        attributes["gateway.upstream_retries"] = record.attempts - 1
    return attributes


Generation = tuple[Span, float]  # a generation's span and the time.perf_counter() it opened at


def open_generation(record: TurnRecord) -> Generation | None:
    """The span of one generation (`chat MODEL`, a client span: the call to a replica), opened
    as its prompt goes upstream; None when traces are off. Its attributes are all set as it ends."""
    span = tracing.start_span(f"{OPERATION} {record.model}", SpanKind.CLIENT)
    if span is None:
        return None
    return span, time.perf_counter()


def end_generation(generation: Generation, record: TurnRecord, chat_format: ChatFormat) -> None:
    """End it with what the record says: what was asked, the replica, usage, TTFT, how it finished."""
    span, started = generation
    if not span.is_recording():  # sampled out: nothing to say
        span.end()
        return
    attributes = request_attributes(record) | result_attributes(record, started)
    if tracing.capture_content:
        attributes |= content_attributes(record, chat_format)
    if record.replica is not None:
        attributes |= server_attributes(record.replica)
    error = None
    if record.replica is None:
        error = "no replica accepted the prompt"
    elif record.ended_early == "failed":
        error = "the generation failed"
    if record.ended_early is not None:
        attributes["gateway.ended_early"] = record.ended_early
    tracing.end(span, attributes, error)


@functools.lru_cache(maxsize=256)
def server_attributes(replica: str) -> dict[str, Any]:
    """`server.address` and `server.port` of a replica's URL (a few, each parsed once)."""
    url = urlsplit(replica)
    return {"server.address": url.hostname or ""} | ({"server.port": url.port} if url.port is not None else {})


def content_attributes(record: TurnRecord, chat_format: ChatFormat) -> dict[str, str]:
    """The generation's text, as GenAI's message attributes (JSON): asked for explicitly only."""
    messages = []
    for item in record.conversation.items:
        if isinstance(item, Message):
            messages.append({"role": item.role, "parts": [{"type": "text", "content": item.text}]})
        elif isinstance(item, Reasoning):
            messages.append({"role": "assistant", "parts": [{"type": "reasoning", "content": item.text}]})
        elif isinstance(item, ToolCall):
            messages.append({"role": "assistant", "parts": [{"type": "tool_call", "id": item.call_id, "name": item.name,
                                                             "arguments": item.arguments}]})
        elif isinstance(item, ToolOutput):
            messages.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": item.call_id,
                                                        "response": item.output}]})
    output = {"role": "assistant", "parts": [{"type": "text", "content": chat_format.decode(record.output_ids)}],
              "finish_reason": record.finish_reason or "error"}
    return {"gen_ai.input.messages": orjson.dumps(messages).decode(),
            "gen_ai.output.messages": orjson.dumps([output]).decode()}
