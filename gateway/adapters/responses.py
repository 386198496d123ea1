"""One Responses API response, transport-agnostic: the events of a started turn.

HTTP (SSE or JSON) and WebSocket mode both drive `response_events`; they differ only
in how events are framed. What the turn leaves behind is committed by the session
module when the response ends normally, and forgotten when it fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from gateway.adapters import compaction, logprobs
from gateway.adapters.responses_events import Event, ResponseWriter
from gateway.adapters.responses_input import ResponsesRequest
from gateway.core.errors import APIError
from gateway.formats.base import ItemDelta, ParseEvent
from gateway.pipeline import session, trace
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.turn import Hold, Turn, held
from gateway.tokenfix.record import TurnRecord


def new_writer(runtime: Runtime, response_id: str, parsed: ResponsesRequest, spec: str) -> ResponseWriter:
    """The writer of a response, its echo completed with the sampling values actually used: a
    `temperature` or `top_p` the request left out is the model's generation default
    (generation_config.json), else vLLM's own (1.0). `spec`: `--responses-spec`."""
    echo = parsed.echo
    for key in ("temperature", "top_p"):
        if echo.get(key) is None:
            echo[key] = float(runtime.defaults.values.get(key, 1.0))
    return ResponseWriter(response_id=response_id, model=parsed.model, echo=echo, spec=spec)


def check_model(runtime: Runtime, model: str) -> None:
    if model != runtime.model_name:
        raise APIError(f"The model '{model}' does not exist; this gateway serves '{runtime.model_name}'.",
                       status=404, code="model_not_found", param="model")


async def response_events(turn: Turn, writer: ResponseWriter, parsed: ResponsesRequest
                          ) -> AsyncIterator[list[Event]]:
    """created … completed|incomplete|failed for a turn that `start()`ed successfully, in
    batches: the events of the tokens one upstream read delivered go out together. Only a
    turn that ended normally is committed, so a failed turn never updates a cache.
    """
    if parsed.compact:
        async with contextlib.aclosing(_compaction_events(turn, writer)) as batches:
            async for batch in batches:
                yield batch
        return
    yield _started(turn, writer, parsed)
    try:
        async with contextlib.aclosing(turn.batches()) as batches:
            async for parse_events in batches:
                if events := item_events(writer, parse_events):
                    yield events
    except APIError as exc:
        yield [_failed(turn, writer, exc)]
        return
    yield [await _ended(turn, writer, parsed)]


async def relay_response(turn: Turn, writer: ResponseWriter, parsed: ResponsesRequest,
                         emit: Callable[[list[Event]], Hold]) -> None:
    """`response_events` pushed to `emit` (a streaming transport's write): the events of each
    upstream read go out from the read itself (`Turn.relay`). `emit` returns None, or an
    awaitable to wait for before more (a slow client)."""
    if parsed.compact:
        async with contextlib.aclosing(_compaction_events(turn, writer)) as batches:
            async for batch in batches:
                await held(emit(batch))
        return
    await held(emit(_started(turn, writer, parsed)))
    try:
        await turn.relay(lambda parse_events: emit(events) if (events := item_events(writer, parse_events)) else None)
    except APIError as exc:
        await held(emit([_failed(turn, writer, exc)]))
        return
    await held(emit([await _ended(turn, writer, parsed)]))


def item_events(writer: ResponseWriter, parse_events: list[ParseEvent]) -> list[Event]:
    """The Responses events of one batch of parse events."""
    on_parse_event = writer.on_parse_event
    if len(parse_events) == 1:
        return on_parse_event(parse_events[0])
    events: list[Event] = []
    for parse_event in coalesce(parse_events):
        events += on_parse_event(parse_event)
    return events


def _started(turn: Turn, writer: ResponseWriter, parsed: ResponsesRequest) -> list[Event]:
    if parsed.text_logprobs and turn.record.logprobs is not None:
        chat_format, record = turn.runtime.format, turn.record
        writer.logprobs = lambda span: logprobs.entries(chat_format, record, *span)
    return writer.start()


def _failed(turn: Turn, writer: ResponseWriter, exc: APIError) -> Event:
    """The turn failed: nothing of it is kept."""
    session.forget(turn.request)
    trace.failed(exc)
    return writer.failed(exc.code or "server_error", exc.message, usage(turn.record))


async def _ended(turn: Turn, writer: ResponseWriter, parsed: ResponsesRequest) -> Event:
    """The final event of a turn that generated to its end; committed unless it failed."""
    final = final_event(turn.record, writer, parsed, incomplete_reason(turn))
    if final["type"] == "response.failed":
        session.forget(turn.request)
    else:
        await session.commit(turn, final["response"])
    return final


async def _compaction_events(turn: Turn, writer: ResponseWriter) -> AsyncIterator[list[Event]]:
    """The summary turn of a `compaction_trigger`: generated whole, answered as one `compaction`
    item; never committed (gateway/adapters/compaction.py)."""
    yield writer.start()
    session.forget(turn.request)
    try:
        async with contextlib.aclosing(turn.batches()) as batches:
            async for _ in batches:
                pass
    except APIError as exc:
        trace.failed(exc)
        yield [writer.failed(exc.code or "server_error", exc.message, usage(turn.record))]
        return
    record = turn.record
    if record.finish_reason == "abort":
        yield [writer.failed("server_error", "the replica aborted the generation", usage(record))]
        return
    events = writer.whole_item(compaction.compaction_item(compaction.summary_text(record.output_items)))
    final = writer.incomplete(usage(record), incomplete_reason(turn)) if record.finish_reason == "length" \
        else writer.completed(usage(record))
    yield [*events, final]


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


async def failed_events(writer: ResponseWriter, exc: APIError) -> AsyncIterator[list[Event]]:
    """A response that failed before generating (e.g. context_length_exceeded)."""
    trace.failed(exc)
    yield [*writer.start(), writer.failed(exc.code or "server_error", exc.message)]


def final_event(turn: TurnRecord, writer: ResponseWriter, parsed: ResponsesRequest,
                reason: str = "max_output_tokens") -> Event:
    """`reason`: what a turn cut for length says ended it (`incomplete_reason`)."""
    if parsed.return_token_ids:
        writer.extra = token_fields(turn)
        if writer.output:  # NeMo-Gym's convention: the turn's last output item carries its ids
            writer.output[-1].update(nemo_fields(turn))
    if turn.finish_reason == "length":
        return writer.incomplete(usage(turn), reason)
    if turn.finish_reason == "abort":
        return writer.failed("server_error", "the replica aborted the generation", usage(turn))
    return writer.completed(usage(turn))


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


def usage(turn: TurnRecord) -> dict[str, Any]:
    output = len(turn.output_ids)
    return {
        "input_tokens": turn.input_tokens,
        "input_tokens_details": {"cached_tokens": turn.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
        "total_tokens": turn.input_tokens + output,
    }


def token_fields(turn: TurnRecord) -> dict[str, Any]:
    """Exact tokens, on request (`return_token_ids`): for RL and for checking on-policy prompts."""
    return {
        "prompt_token_ids": turn.prompt_token_ids,
        "output_token_ids": turn.output_ids,
        "output_logprobs": turn.logprobs,
    }


def nemo_fields(turn: TurnRecord) -> dict[str, Any]:
    """The same ids the way NeMo-RL / NeMo-Gym read them off a returned message or output item."""
    return {
        "prompt_token_ids": turn.prompt_token_ids,
        "generation_token_ids": turn.output_ids,
        "generation_log_probs": turn.logprobs,
    }
