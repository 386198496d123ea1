"""POST /v1/chat/completions over the same turn pipeline as the Responses API.

The prompt continues from exact earlier tokens when it can: ids the client put on the
last assistant message, else the `rollout_id`'s trajectory, else the `prompt_cache_key`
session. A call with `rollout_id` is recorded in that rollout once it finishes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.chat_input import ChatRequest, parse_chat_request
from gateway.adapters.responses import check_model, coalesce
from gateway.adapters.rollout_fields import begin_rollout
from gateway.core.conversation import Message, Reasoning, ToolCall
from gateway.core.errors import APIError
from gateway.core.ids import new_id
from gateway.formats.base import ItemDelta, ItemStarted, ParseEvent
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.turn import Turn, TurnRequest
from gateway.server.http import JSONResponse, read_json, sse_response


async def create_chat_completion(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    body = await read_json(request, request.app.state.settings.max_body_bytes)
    parsed = parse_chat_request(body)
    check_model(runtime, parsed.model)
    rollout = begin_rollout(runtime, body)
    key = parsed.prompt_cache_key
    prefix = parsed.client_prefix or (rollout.prefix if rollout else None) or (
        runtime.sessions.get(key) if key else None)
    turn = Turn(runtime, TurnRequest(parsed.conversation, parsed.sampling, affinity=rollout.rollout_id if rollout
                                     else key, prefix=prefix, check_prompt=rollout.check if rollout else None))
    await turn.start()

    def remember() -> None:
        state = turn.token_state()
        if state is None:
            return  # an aborted generation is not history
        if key:
            runtime.sessions.put(key, state)
        if rollout:
            rollout.commit(turn, state)

    head = {"id": new_id("chatcmpl"), "created": int(time.time()), "model": parsed.model}
    if parsed.stream:
        return sse_response(_stream(turn, parsed, head, remember))
    async for _ in turn.events():
        pass
    remember()
    return JSONResponse(_completion(turn, parsed, head))


def _completion(turn: Turn, parsed: ChatRequest, head: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None, "reasoning": None, "tool_calls": []}
    texts, reasoning = [], []
    for item in turn.output_items:
        if isinstance(item, Message):
            texts.append(item.text)
        elif isinstance(item, Reasoning):
            reasoning.append(item.text)
        elif isinstance(item, ToolCall):
            message["tool_calls"].append({"id": item.call_id, "type": "function",
                                          "function": {"name": item.name, "arguments": item.arguments}})
    message["content"] = "".join(texts) if texts else None
    message["reasoning"] = "".join(reasoning) if reasoning else None
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": _finish_reason(turn),
                              "logprobs": _logprobs(turn) if parsed.logprobs else None}
    body = {**head, "object": "chat.completion", "choices": [choice], "usage": _usage(turn)}
    if parsed.return_token_ids:
        body["prompt_token_ids"] = turn.prompt_token_ids
        choice["token_ids"] = turn.output_ids
    return body


async def _stream(turn: Turn, parsed: ChatRequest, head: dict[str, Any],
                  remember: Callable[[], None]) -> AsyncIterator[bytes]:
    def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None, **extra}
        body = {**head, "object": "chat.completion.chunk", "choices": [choice]}
        return b"data: " + orjson.dumps(body) + b"\n\n"

    first: dict[str, Any] = {"role": "assistant", "content": ""}
    yield chunk(first) if not parsed.return_token_ids else _with_prompt_ids(chunk(first), turn)
    kinds: dict[int, str] = {}
    tool_index: dict[int, int] = {}

    def chunks(events: list[ParseEvent]) -> Iterator[bytes]:
        for event in coalesce(events):
            if isinstance(event, ItemStarted):
                kinds[event.index] = event.kind
                if event.kind == "tool_call":
                    tool_index[event.index] = len(tool_index)
                    yield chunk({"tool_calls": [{"index": tool_index[event.index], "id": event.call_id,
                                                 "type": "function",
                                                 "function": {"name": event.name, "arguments": ""}}]})
            elif isinstance(event, ItemDelta):
                kind = kinds[event.index]
                if kind == "text":
                    yield chunk({"content": event.text})
                elif kind == "reasoning":
                    yield chunk({"reasoning": event.text})
                else:
                    yield chunk({"tool_calls": [{"index": tool_index[event.index],
                                                 "function": {"arguments": event.text}}]})

    try:
        async for batch in turn.batches():  # tokens read together: one write
            if data := b"".join(chunks(batch)):
                yield data
    except APIError as exc:
        yield b"data: " + orjson.dumps(exc.http_body()) + b"\n\n"
        yield b"data: [DONE]\n\n"
        return
    remember()
    extra: dict[str, Any] = {}
    if parsed.return_token_ids:
        extra["token_ids"] = turn.output_ids
    if parsed.logprobs:
        extra["logprobs"] = _logprobs(turn)
    yield chunk({}, _finish_reason(turn), **extra)
    if parsed.include_usage:
        yield b"data: " + orjson.dumps({**head, "object": "chat.completion.chunk", "choices": [],
                                        "usage": _usage(turn)}) + b"\n\n"
    yield b"data: [DONE]\n\n"


def _with_prompt_ids(first_chunk: bytes, turn: Turn) -> bytes:
    body = orjson.loads(first_chunk[6:])
    body["prompt_token_ids"] = turn.prompt_token_ids
    return b"data: " + orjson.dumps(body) + b"\n\n"


def _finish_reason(turn: Turn) -> str:
    if turn.finish_reason == "length":
        return "length"
    if any(isinstance(item, ToolCall) for item in turn.output_items):
        return "tool_calls"
    return turn.finish_reason or "stop"


def _usage(turn: Turn) -> dict[str, Any]:
    output = len(turn.output_ids)
    return {"prompt_tokens": turn.input_tokens, "completion_tokens": output,
            "total_tokens": turn.input_tokens + output,
            "prompt_tokens_details": {"cached_tokens": turn.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": turn.reasoning_tokens}}


def _logprobs(turn: Turn) -> dict[str, Any]:
    """Logprob entries name tokens as "token_id:N" (vLLM's return_tokens_as_token_ids)."""
    logprobs = turn.logprobs or []
    return {"content": [{"token": f"token_id:{token}", "logprob": logprob, "bytes": None, "top_logprobs": []}
                        for token, logprob in zip(turn.output_ids, logprobs)]}
