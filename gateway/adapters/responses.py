"""One Responses API response, transport-agnostic: the events of a started turn.

HTTP (SSE or JSON) and WebSocket mode both drive `response_events`; they differ only
in how events are framed and where the turn's exact tokens are remembered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from gateway.adapters.responses_events import Event, ResponseWriter
from gateway.adapters.responses_input import ResponsesRequest
from gateway.errors import APIError
from gateway.runtime import Runtime
from gateway.turn import Turn

OnFinished = Callable[[Turn, Event], None]


def check_model(runtime: Runtime, model: str) -> None:
    if model != runtime.model_name:
        raise APIError(f"The model '{model}' does not exist; this gateway serves '{runtime.model_name}'.",
                       status=404, code="model_not_found", param="model")


async def response_events(turn: Turn, writer: ResponseWriter, parsed: ResponsesRequest,
                          on_finished: OnFinished | None = None) -> AsyncIterator[Event]:
    """created … completed|incomplete|failed for a turn that `start()`ed successfully.

    `on_finished(turn, final_event)` runs only for a turn that ended normally, so a failed
    turn never updates a cache.
    """
    for event in writer.start():
        yield event
    try:
        async for parse_event in turn.events():
            for event in writer.on_parse_event(parse_event):
                yield event
    except APIError as exc:
        for event in writer.finish(None):
            yield event
        yield writer.failed(exc.code or "server_error", exc.message, usage(turn))
        return
    for event in writer.finish(turn.output_ids if turn.finish_reason in ("stop", "length") else None):
        yield event
    final = final_event(turn, writer, parsed)
    if on_finished is not None and final["type"] != "response.failed":
        on_finished(turn, final)
    yield final


async def failed_events(writer: ResponseWriter, exc: APIError) -> AsyncIterator[Event]:
    """A response that failed before generating (e.g. context_length_exceeded)."""
    for event in writer.start():
        yield event
    yield writer.failed(exc.code or "server_error", exc.message)


def final_event(turn: Turn, writer: ResponseWriter, parsed: ResponsesRequest) -> Event:
    if parsed.return_token_ids:
        writer.extra = token_fields(turn)
    if turn.finish_reason == "length":
        return writer.incomplete(usage(turn))
    if turn.finish_reason == "abort":
        return writer.failed("server_error", "the replica aborted the generation", usage(turn))
    return writer.completed(usage(turn))


def usage(turn: Turn) -> dict[str, Any]:
    output = len(turn.output_ids)
    return {
        "input_tokens": turn.input_tokens,
        "input_tokens_details": {"cached_tokens": turn.cached_tokens},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
        "total_tokens": turn.input_tokens + output,
    }


def token_fields(turn: Turn) -> dict[str, Any]:
    """Exact tokens, on request (`return_token_ids`): for RL and for checking on-policy prompts."""
    return {
        "prompt_token_ids": turn.prompt_token_ids,
        "output_token_ids": turn.output_ids,
        "output_logprobs": turn.logprobs,
    }
