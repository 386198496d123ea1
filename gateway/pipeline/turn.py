"""The turn pipeline shared by every API: render → upstream → parse.

A `Turn` is one model call. `start()` renders the prompt and gets a replica to accept
it (so nothing has been sent to the client yet when that fails); iterating `events()`
streams the parser's item events while recording the exact token ids and logprobs.
HTTP, SSE, WebSocket and Chat Completions adapters all drive this same object.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from array import array
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from gateway.core.conversation import Conversation, Item, Message
from gateway.core.errors import APIError, UpstreamUnavailable, context_length_exceeded
from gateway.core.ids import new_id
from gateway.core.sampling import SamplingOptions, resolve
from gateway.formats.base import Covered, ItemDone, ItemStarted, ParseEvent, output_item
from gateway.pipeline.runtime import Runtime
from gateway.server import observe
from gateway.tokenfix.restore import Generated, restore, uncovered
from gateway.tokenfix.splice import splice, splice_tail
from gateway.tokenfix.state import TokenState
from gateway.upstream.chunks import Usage
from gateway.upstream.replica import UpstreamStream

log = logging.getLogger(__name__)

# Renders of items with more text than this run off the event loop.
_INLINE_RENDER_CHARS = 16_384
T = TypeVar("T")


@dataclass(slots=True)
class TurnRequest:
    conversation: Conversation
    sampling: SamplingOptions
    affinity: str | None = None  # session key: same key → same replica
    prefix: TokenState | None = None  # exact tokens of an earlier turn this one may continue
    # Ids the model generated in earlier turns, sent back by the client (reasoning blobs): they
    # extend `prefix` (gateway/tokenfix/restore.py), so a history no cache holds is still exact.
    generated: Sequence[Generated] = ()
    covered: Covered | None = None  # the adapter already checked that the history continues `prefix`
    # Runs on the rendered prompt before anything goes upstream; may raise APIError (rollout masks).
    check_prompt: Callable[[Turn], None] | None = None


class Turn:
    def __init__(self, runtime: Runtime, request: TurnRequest) -> None:
        self.runtime = runtime
        self.request = request
        self.request_id = new_id("gw")
        self.prompt_ids: Sequence[int] = []  # a list, or an int32 array when spliced onto exact tokens
        self.output_ids: list[int] = []
        self.logprobs: list[float] | None = [] if request.sampling.logprobs is not None else None
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.reasoning_tokens = 0
        self.output_items: list[Item] = []  # the model's output as canonical items
        self.spliced = False  # the prompt reuses the exact tokens of `request.prefix`
        self.non_monotonic = False  # a prefix was offered but the history no longer continues it
        self._continued = False  # the history starts with all of `request.prefix`'s items
        self.attempts = 0  # replicas asked to take the prompt: more than one means retries
        self.first_token_at: float | None = None  # time.perf_counter() of the first output token
        self.interrupted: BaseException | None = None  # what ended events() early: a failure or the client leaving
        self._stream: UpstreamStream | None = None
        observe.attach(self)

    async def start(self) -> None:
        """Render and get the prompt accepted by a replica; raises APIError before any output."""
        self.prompt_ids = await self._render()
        if self.request.check_prompt is not None:
            self.request.check_prompt(self)
        max_model_len = self.runtime.pool.max_model_len
        requested = self.request.sampling.max_tokens
        if max_model_len is not None:
            room = max_model_len - len(self.prompt_ids)
            if room < (requested or 1):
                raise context_length_exceeded(len(self.prompt_ids), max_model_len, requested or 1)
            max_tokens = min(requested or room, room)
        else:
            max_tokens = requested or 4096
        params = resolve(self.request.sampling, self.runtime.defaults, max_tokens=max_tokens,
                         stop_token_ids=self.runtime.stop_token_ids)
        self._stream = await self._open(params)

    async def _render(self) -> Sequence[int]:
        """The prompt: the exact earlier tokens and the new items' when the history continues
        them, else the full render. Big renders run off the event loop."""
        covered = self.request.covered
        if turns := uncovered(self.request.conversation, self.request.generated, self.request.prefix):
            self.request.prefix = await asyncio.to_thread(restore, self.runtime.format, self.request.conversation,
                                                          turns, self.request.prefix)
            covered = None  # that was for the prefix before
        conversation, prefix, chat_format = self.request.conversation, self.request.prefix, self.runtime.format
        if covered is None and prefix is not None:
            covered = prefix.continued_by(conversation, chat_format.turn_terminators)
        if covered is not None:
            self._continued = True
            # Cost follows the new items: the format renders them alone when it can.
            tail = await _off_loop_if_big(conversation.items[covered.items:], chat_format.render_tail,
                                          conversation, covered)
            if tail is not None:
                spliced = splice_tail(prefix, tail, chat_format.turn_terminators)
                if spliced is not None:
                    self.spliced = True
                    return spliced
                covered = None  # the same verdict as splicing the full renders: it does not continue
        return await _off_loop_if_big(conversation.items, self._prompt_ids, covered)

    def _prompt_ids(self, covered: Covered | None) -> Sequence[int]:
        """The full render, with the exact earlier tokens spliced in when the history continues."""
        conversation, prefix, chat_format = self.request.conversation, self.request.prefix, self.runtime.format
        template = chat_format.render(conversation)
        if prefix is None:
            return template
        if covered is not None:
            head = dataclasses.replace(conversation, items=conversation.items[:covered.items])
            spliced = splice(prefix.tokens, prefix.prompt_len, chat_format.render(head), template,
                             chat_format.turn_terminators)
            if spliced is not None:
                self.spliced = True
                return spliced
        self.non_monotonic = True
        log.info("request %s: history does not continue its cached tokens; rendered in full", self.request_id)
        return template

    async def _open(self, params: dict) -> UpstreamStream:
        """Try replicas until one accepts: nothing was generated yet, so retrying is safe."""
        tried = []
        last_error: APIError | None = None
        for _ in range(len(self.runtime.pool.replicas)):
            try:
                replica = self.runtime.pool.pick(self.request.affinity, exclude=tried)
            except UpstreamUnavailable as exc:
                raise last_error or exc
            try:
                self.attempts += 1
                return await replica.open(self.prompt_ids, params, self.request_id)
            except UpstreamUnavailable as exc:
                log.warning("request %s: %s; trying another replica", self.request_id, exc.message)
                tried.append(replica)
                last_error = exc
        raise last_error or UpstreamUnavailable("no healthy vLLM replica is available")

    async def batches(self) -> AsyncIterator[list[ParseEvent]]:
        """Parsed item events, a list per batch of tokens the replica delivered at once (what was
        read by then: relayed as one, never waited for). Leaving early (client gone) aborts the
        upstream request."""
        assert self._stream is not None, "start() first"
        parser = self.runtime.format.parser()
        started: dict[int, ItemStarted] = {}
        try:
            async for chunk in self._stream:
                if isinstance(chunk, Usage):
                    self.usage = chunk
                    continue
                ids = chunk.token_ids
                if self.first_token_at is None and ids:
                    self.first_token_at = time.perf_counter()
                self.output_ids.extend(ids)
                if self.logprobs is not None and chunk.logprobs is not None:
                    self.logprobs.extend(chunk.logprobs)
                if chunk.finish_reason is not None:
                    self.finish_reason = chunk.finish_reason
                events = parser.feed(ids)
                self.reasoning_tokens = parser.reasoning_tokens
                for event in events:
                    self._track(event, started)
                if events:
                    yield events
            events = parser.finish()
            for event in events:
                self._track(event, started)
            if events:
                yield events
        except BaseException as exc:
            self.interrupted = exc
            raise
        finally:
            await self._stream.aclose()

    async def events(self) -> AsyncIterator[ParseEvent]:
        """`batches()` one event at a time."""
        async with contextlib.aclosing(self.batches()) as batches:
            async for batch in batches:
                for event in batch:
                    yield event

    def _track(self, event: ParseEvent, started: dict[int, ItemStarted]) -> None:
        """Give tool calls their ids and collect finished items as canonical output."""
        if isinstance(event, ItemStarted):
            if event.kind == "tool_call":
                event.call_id = new_id("call")
            started[event.index] = event
        elif isinstance(event, ItemDone):
            self._on_done(event, started)

    def _on_done(self, event: ItemDone, started: dict[int, ItemStarted]) -> None:
        self.output_items.append(output_item(started.pop(event.index), event.text))

    @property
    def turn_items(self) -> list[Item]:
        """The model's turn as the history holds it: a generation with no visible item (only
        whitespace, say) is still an assistant turn that the next prompt must contain."""
        return self.output_items or [Message(role="assistant", text="")]

    def token_state(self) -> TokenState | None:
        """The exact tokens of this turn for the next one to continue; None unless it finished."""
        if self.finish_reason not in ("stop", "length"):
            return None
        conversation, prefix = self.request.conversation, self.request.prefix
        # A continued history extends its prefix's digest: the cost follows the new items.
        after = prefix if self._continued and prefix is not None and prefix.history_hash is not None else None
        items = conversation.items[after.items:] if after is not None else conversation.items
        return TokenState.build(conversation, [*items, *self.turn_items], self.prompt_ids, self.output_ids,
                                self.runtime.format.turn_terminators, after=after)

    @property
    def prompt_token_ids(self) -> list[int]:
        """`prompt_ids` as a list, for JSON."""
        ids = self.prompt_ids
        return ids.tolist() if isinstance(ids, array) else list(ids)

    @property
    def replica(self) -> str | None:
        """The URL of the replica that accepted the prompt."""
        return self._stream.replica.url if self._stream else None

    @property
    def input_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def cached_tokens(self) -> int:
        return (self.usage.cached_tokens or 0) if self.usage else 0


async def _off_loop_if_big(items: Sequence[Item], render: Callable[..., T], *args: Any) -> T:
    """`render(*args)` inline when `items` hold little text, else in a thread: a thread hop
    costs more than a small render, and a big one must not stall the event loop."""
    if _text_size(items) <= _INLINE_RENDER_CHARS:
        return render(*args)
    return await asyncio.to_thread(render, *args)


def _text_size(items: Sequence[Item]) -> int:
    total = 0
    for item in items:
        total += len(getattr(item, "text", None) or getattr(item, "output", None) or getattr(item, "arguments", ""))
        if total > _INLINE_RENDER_CHARS:
            break
    return total
