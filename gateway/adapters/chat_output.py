"""Chat Completions output: the completion object, or its stream of chunks, for a started turn.

The same turn pipeline as the Responses API; this module only shapes what it produced.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import orjson

from gateway.adapters import logprobs
from gateway.adapters.chat_input import ChatRequest
from gateway.adapters.responses import coalesce, nemo_fields
from gateway.core.conversation import Message, Reasoning, ToolCall
from gateway.core.errors import APIError
from gateway.formats.base import ItemDelta, ItemStarted, ParseEvent
from gateway.pipeline import session
from gateway.pipeline.turn import Hold, Turn, held


def completion(turn: Turn, parsed: ChatRequest, head: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None, "reasoning": None,
                               "tool_calls": []}
    texts, reasoning = [], []
    for item in turn.record.output_items:
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
                              "stop_reason": turn.record.stop_reason,
                              "logprobs": _logprobs(turn) if parsed.logprobs else None}
    body = {**head, "object": "chat.completion", "choices": [choice], "usage": _usage(turn)}
    if parsed.return_token_ids:
        body["prompt_token_ids"] = turn.record.prompt_token_ids
        choice["token_ids"] = turn.record.output_ids
        message.update(nemo_fields(turn.record))
    return body


def completions(turns: list[Turn], parsed: ChatRequest, head: dict[str, Any], rollout_id: str | None = None
                ) -> dict[str, Any]:
    """`n` generations of one prompt as one completion: choice i is turn i; the prompt counts once.
    With `rollout_id`, choice i names the rollout branch it is recorded in."""
    bodies = [completion(turn, parsed, head) for turn in turns]
    body = bodies[0]
    body["choices"] = [{**each["choices"][0], "index": i} for i, each in enumerate(bodies)]
    if rollout_id is not None:
        for i, choice in enumerate(body["choices"]):
            choice["rollout_id"] = session.branch_id(rollout_id, i)
    completion_tokens = sum(each["usage"]["completion_tokens"] for each in bodies)
    body["usage"] = {**body["usage"], "completion_tokens": completion_tokens,
                     "total_tokens": body["usage"]["prompt_tokens"] + completion_tokens,
                     "completion_tokens_details": {"reasoning_tokens": sum(
                         each["usage"]["completion_tokens_details"]["reasoning_tokens"] for each in bodies)}}
    return body


async def sample_chunks(turns: list[Turn], parsed: ChatRequest, head: dict[str, Any], rollout_id: str | None
                        ) -> AsyncIterator[bytes]:
    """The SSE body of `n` streamed samples, choice i's chunks as turn i makes them (interleaved,
    as vLLM streams `n`), then one usage chunk for all and `[DONE]`."""
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def pump(index: int, turn: Turn) -> None:
        branch = session.branch_id(rollout_id, index) if rollout_id is not None else None
        try:
            await chunks(turn, parsed, head, queue.put_nowait, index=index, rollout_id=branch)
        finally:
            queue.put_nowait(None)

    tasks = [asyncio.create_task(pump(i, turn)) for i, turn in enumerate(turns)]
    try:
        running = len(tasks)
        while running:
            data = await queue.get()
            if data is None:
                running -= 1
            else:
                yield data
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if parsed.include_usage:
        usages = [_usage(turn) for turn in turns]
        output = sum(usage["completion_tokens"] for usage in usages)
        usage = {**usages[0], "completion_tokens": output, "total_tokens": usages[0]["prompt_tokens"] + output,
                 "completion_tokens_details": {"reasoning_tokens": sum(
                     usage["completion_tokens_details"]["reasoning_tokens"] for usage in usages)}}
        yield b"data: " + orjson.dumps({**head, "object": "chat.completion.chunk", "choices": [],
                                        "usage": usage}) + b"\n\n"
    yield b"data: [DONE]\n\n"


async def chunks(turn: Turn, parsed: ChatRequest, head: dict[str, Any], emit: Callable[[bytes], Hold], *, index: int | None = None,
                 rollout_id: str | None = None) -> None:
    """The SSE body of a streamed completion, pushed to `emit` (the tokens of each upstream read
    from the read itself: `Turn.relay`); the turn is committed once it ended normally.
    `index`: choice `index` of `n` (sample_chunks ends the body, and only the first choice
    continues the session); `rollout_id`: the rollout branch it is recorded in."""
    def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        choice = {"index": index or 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None, **extra}
        body = {**head, "object": "chat.completion.chunk", "choices": [choice]}
        return b"data: " + orjson.dumps(body) + b"\n\n"

    sent = 0  # output positions whose logprobs went out

    def upto(end: int | None) -> dict[str, Any]:
        """The logprobs of the tokens since the last chunk's through `end` (None: all), as vLLM
        streams them: each chunk its own tokens, markup with the text that follows it."""
        nonlocal sent
        content = logprobs.entries(turn.runtime.format, turn.record, sent, end)
        sent += len(content)
        return {"logprobs": {"content": content, "refusal": None}}

    first: dict[str, Any] = {"role": "assistant", "content": ""}
    opening = chunk(first) if rollout_id is None else chunk(first, rollout_id=rollout_id)
    await held(emit(opening if not parsed.return_token_ids else _with_prompt_ids(opening, turn)))
    kinds: dict[int, str] = {}
    tool_index: dict[int, int] = {}

    def encode(events: list[ParseEvent]) -> Iterator[bytes]:
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
                extra = upto(event.span[1]) if parsed.logprobs and event.span is not None else {}
                if kind == "text":
                    yield chunk({"content": event.text}, **extra)
                elif kind == "reasoning":
                    yield chunk({"reasoning": event.text}, **extra)
                else:
                    yield chunk({"tool_calls": [{"index": tool_index[event.index],
                                                 "function": {"arguments": event.text}}]}, **extra)

    try:  # tokens read together: one write
        await turn.relay(lambda batch: emit(data) if (data := b"".join(encode(batch))) else None)
    except APIError as exc:
        await held(emit(b"data: " + orjson.dumps(exc.http_body()) + b"\n\n"))
        if index is None:
            await held(emit(b"data: [DONE]\n\n"))
        return
    if turn.record.finished:
        await session.commit(turn, sample=index or 0)
    extra: dict[str, Any] = {"stop_reason": turn.record.stop_reason}
    if parsed.return_token_ids:
        extra["token_ids"] = turn.record.output_ids
    if parsed.logprobs:
        extra.update(upto(None))  # what no delta took: the stop id, trailing markup
    ending = [chunk({}, _finish_reason(turn), **extra)]
    if index is None:  # else sample_chunks ends the body
        if parsed.include_usage:
            ending.append(b"data: " + orjson.dumps({**head, "object": "chat.completion.chunk", "choices": [],
                                                    "usage": _usage(turn)}) + b"\n\n")
        ending.append(b"data: [DONE]\n\n")
    await held(emit(b"".join(ending)))



def _with_prompt_ids(first_chunk: bytes, turn: Turn) -> bytes:
    body = orjson.loads(first_chunk[6:])
    body["prompt_token_ids"] = turn.record.prompt_token_ids
    return b"data: " + orjson.dumps(body) + b"\n\n"


def _finish_reason(turn: Turn) -> str:
    if turn.record.finish_reason == "length":
        return "length"
    if any(isinstance(item, ToolCall) for item in turn.record.output_items):
        return "tool_calls"
    return turn.record.finish_reason or "stop"


def _usage(turn: Turn) -> dict[str, Any]:
    output = len(turn.record.output_ids)
    return {"prompt_tokens": turn.record.input_tokens, "completion_tokens": output,
            "total_tokens": turn.record.input_tokens + output,
            "prompt_tokens_details": {"cached_tokens": turn.record.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": turn.record.reasoning_tokens}}


def _logprobs(turn: Turn) -> dict[str, Any]:
    """One entry per generated token, reasoning and markup included (aligned with `token_ids`:
    what RL needs), with the token's text, bytes and the `top_logprobs` alternatives."""
    return {"content": logprobs.entries(turn.runtime.format, turn.record), "refusal": None}
