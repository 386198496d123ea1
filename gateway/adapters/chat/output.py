"""Chat Completions output: the completion object, or its stream of chunks (`ChatChunks`, the
exchange's writer), for a turn.

The same turn pipeline as the Responses API; this module only shapes what it produced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import orjson

from gateway.adapters import _logprobs as logprobs
from gateway.adapters._generation import coalesce, nemo_fields
from gateway.adapters.chat.input import ChatRequest
from gateway.core.conversation import Message, Reasoning, ToolCall
from gateway.core.errors import APIError
from gateway.core.push import Hold
from gateway.formats.base import ItemDelta, ItemStarted, ParseEvent
from gateway.pipeline import session
from gateway.pipeline.turn import Turn

__all__ = ["ChatChunks", "completion", "completions", "samples_ending"]


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
                              "logprobs": _logprobs(turn, parsed.tokens_as_ids) if parsed.logprobs else None}
    body = {**head, "object": "chat.completion", "choices": [choice], "usage": _usage(turn)}
    if parsed.return_token_ids:
        body["prompt_token_ids"] = turn.record.prompt_token_ids
        choice["token_ids"] = turn.record.output_ids
        choice["weight_versions"] = turn.record.weight_versions  # which weights made which token, vLLM's name
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


def samples_ending(turns: Sequence[Turn], parsed: ChatRequest, head: dict[str, Any]) -> bytes:
    """What ends the SSE body of `n` streamed samples, once every one ended: one usage chunk for
    all (with `include_usage`) and `[DONE]`."""
    ending = b""
    if parsed.include_usage:
        usages = [_usage(turn) for turn in turns]
        output = sum(usage["completion_tokens"] for usage in usages)
        usage = {**usages[0], "completion_tokens": output, "total_tokens": usages[0]["prompt_tokens"] + output,
                 "completion_tokens_details": {"reasoning_tokens": sum(
                     usage["completion_tokens_details"]["reasoning_tokens"] for usage in usages)}}
        ending = b"data: " + orjson.dumps({**head, "object": "chat.completion.chunk", "choices": [],
                                           "usage": usage}) + b"\n\n"
    return ending + b"data: [DONE]\n\n"


class ChatChunks:
    """A streamed completion as the exchange's writer: its chunks pushed to `sink` (the tokens
    of each upstream read from the read itself). `index`: choice `index` of `n` (then
    `samples_ending` ends the body); `rollout_id`: the rollout branch it is recorded in."""

    keeps = True

    def __init__(self, parsed: ChatRequest, head: dict[str, Any], sink: Callable[[bytes], Hold], *,
                 index: int | None = None, rollout_id: str | None = None) -> None:
        self.parsed = parsed
        self.head = head
        self.sink = sink
        self.index = index
        self.rollout_id = rollout_id
        self._turn: Turn | None = None
        self._sent = 0  # output positions whose logprobs and ids went out
        self._per_token = parsed.logprobs or parsed.return_token_ids
        self._kinds: dict[int, str] = {}
        self._tool_index: dict[int, int] = {}

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        choice = {"index": self.index or 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None,
                  **extra}
        return b"data: " + orjson.dumps({**self.head, "object": "chat.completion.chunk", "choices": [choice]}) \
            + b"\n\n"

    def _upto(self, end: int | None) -> dict[str, Any]:
        """The logprobs and ids of the tokens since the last chunk's through `end` (None: all), as
        vLLM streams them: each chunk its own tokens, markup with the text that follows it."""
        turn, parsed = self._turn, self.parsed
        assert turn is not None
        record, start = turn.record, self._sent
        stop = len(record.output_ids) if end is None else min(end, len(record.output_ids))
        extra: dict[str, Any] = {}
        if parsed.logprobs:
            content = logprobs.entries(turn.runtime.format, record, start, stop, as_ids=parsed.tokens_as_ids)
            extra["logprobs"] = {"content": content, "refusal": None}
        if parsed.return_token_ids:
            extra["token_ids"] = record.output_ids[start:stop]
        self._sent = max(start, stop)
        return extra

    def started(self, turn: Turn) -> Hold:
        self._turn = turn
        first: dict[str, Any] = {"role": "assistant", "content": ""}
        opening = self._chunk(first) if self.rollout_id is None else self._chunk(first, rollout_id=self.rollout_id)
        if self.parsed.return_token_ids:
            opening = _with_prompt_ids(opening, turn)
        return self.sink(opening)

    def events(self, events: list[ParseEvent]) -> Hold:
        data = b"".join(self._encode(events))  # tokens read together: one write
        return self.sink(data) if data else None

    def _encode(self, events: list[ParseEvent]) -> Iterator[bytes]:
        kinds, tool_index, chunk = self._kinds, self._tool_index, self._chunk
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
                extra = self._upto(event.span[1]) if self._per_token and event.span is not None else {}
                if kind == "text":
                    yield chunk({"content": event.text}, **extra)
                elif kind == "reasoning":
                    yield chunk({"reasoning": event.text}, **extra)
                else:
                    yield chunk({"tool_calls": [{"index": tool_index[event.index],
                                                 "function": {"arguments": event.text}}]}, **extra)

    def answer(self, turn: Turn) -> None:
        return None

    def ended(self, turn: Turn) -> Hold:
        parsed = self.parsed
        extra: dict[str, Any] = {"stop_reason": turn.record.stop_reason}
        if self._per_token:
            extra.update(self._upto(None))  # what no delta took: the stop id, trailing markup
        if parsed.return_token_ids:  # on the last chunk, as vLLM's generate streams them
            extra["weight_versions"] = turn.record.weight_versions
        ending = [self._chunk({}, _finish_reason(turn), **extra)]
        if self.index is None:  # else samples_ending ends the body
            if parsed.include_usage:
                ending.append(b"data: " + orjson.dumps({**self.head, "object": "chat.completion.chunk",
                                                        "choices": [], "usage": _usage(turn)}) + b"\n\n")
            ending.append(b"data: [DONE]\n\n")
        return self.sink(b"".join(ending))

    def failed(self, turn: Turn, error: APIError) -> Hold:
        if self._turn is None:
            raise error  # nothing went out: an HTTP error
        data = b"data: " + orjson.dumps(error.http_body()) + b"\n\n"
        return self.sink(data + b"data: [DONE]\n\n" if self.index is None else data)


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


def _logprobs(turn: Turn, as_ids: bool) -> dict[str, Any]:
    """One entry per generated token, reasoning and markup included (aligned with `token_ids`:
    what RL needs), with the token's text (or "token_id:N"), bytes and the `top_logprobs` alternatives."""
    return {"content": logprobs.entries(turn.runtime.format, turn.record, as_ids=as_ids), "refusal": None}
