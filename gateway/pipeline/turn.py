"""One model call: render the prompt → a replica → parsed output, written down as it goes.

`gateway/pipeline/session.py` decides what a turn continues and makes the `Turn`;
`async with turn` starts it — renders the prompt (the one prompt decision,
gateway/tokenfix/prompt.py) and gets a replica to accept it, so nothing has been sent to the
client yet when that fails — and closes it however the block is left (the replica's work is
aborted if unfinished); `relay()` pushes the parser's item events to a consumer from the
upstream read itself (what engine pace needs), through `TurnOutput` (gateway/pipeline/_output.py).
gateway/pipeline/exchange.py is the one place that runs a turn so. Everything that happened goes into
`self.record` (gateway/tokenfix/record.py), which the transport hands on; the turn never
changes its request, and nothing holds the turn to observe it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Sequence
from typing import Any, Self, TypeVar

from gateway.core import tracing
from gateway.core.conversation import Item, Message, images_of
from gateway.core.errors import APIError, UpstreamFailed, context_length_exceeded, invalid_request
from gateway.core.ids import new_id
from gateway.core.image import check_images, text_only
from gateway.core.push import Hold, Sink, held
from gateway.core.sampling import OutputConstraint, SamplingOptions, resolve
from gateway.formats.base import Covered, ParseEvent
from gateway.formats.length import too_long
from gateway.pipeline import _spans as spans
from gateway.pipeline._output import TurnOutput
from gateway.pipeline.request import TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.tokenfix.prompt import PromptBuilder
from gateway.tokenfix.record import TurnRecord
from gateway.tokenfix.state import TokenState
from gateway.upstream.chunks import TokenChunk, Usage
from gateway.upstream.disaggregation import Legs, open_legs, prefill_sampling
from gateway.upstream.prefix_index import KeyChain
from gateway.upstream.protocol import PATHS, encode, request_body
from gateway.upstream.replica import Replica, UpstreamStream

__all__ = ["Turn", "handed_on"]

log = logging.getLogger(__name__)

_GRAMMARS_ONLY = OutputConstraint()  # nothing asked for but the custom tools' grammars
# Renders of items with more text than this run off the event loop.
_INLINE_RENDER_CHARS = 16_384
T = TypeVar("T")


class Turn:
    def __init__(self, runtime: Runtime, request: TurnRequest, *, sampling: SamplingOptions,
                 prefix: TokenState | None, covered: Covered | None, affinity: str | None) -> None:
        """`prefix`: the exact earlier tokens this turn may continue (`covered`: already checked
        this far); `affinity`: same key, same replica."""
        self.runtime = runtime
        self.request = request  # what the client asked for; session.commit reads where to record it
        self.sampling = sampling
        self.affinity = affinity
        self.adapter = request.adapter
        self._using = False  # counted in the pool's users of `adapter`
        self._covered = covered
        self.record = TurnRecord(request_id=new_id("gw"), model=self.adapter or runtime.model_name,
                                 conversation=request.conversation, prefix=prefix,
                                 logprobs=[] if sampling.logprobs is not None else None,
                                 top_logprobs=[] if sampling.logprobs else None,
                                 started_at=time.perf_counter())
        self._stream: UpstreamStream | None = None
        self._span: spans.Generation | None = None  # traces on: the generation's span, open until aclose
        self._share: str | None = None  # the session key counted in the runtime's fair share until aclose
        self.legs: Legs | None = None  # prefill/decode disaggregation's, when the pool has roles

    async def start(self) -> None:
        """Render and get the prompt accepted by a replica; raises APIError before any output.
        With `truncate` (Responses `truncation: "auto"`), a history too long for the context
        window loses its oldest exchanges (everything before the next user message) until it fits."""
        with tracing.phase("gateway.render"):
            while True:
                try:
                    max_tokens = await self._fit()
                    break
                except APIError as exc:
                    if exc.code != "context_length_exceeded" or not self.request.truncate or not self._drop_oldest():
                        raise
        record = self.record
        params = resolve(self.sampling, self.runtime.defaults, max_tokens=max_tokens,
                         stop_token_ids=self.runtime.stop_token_ids)
        if structured := self._structured_outputs():
            params["structured_outputs"] = structured
        if self.sampling.priority is None:  # the tier's, after the session's generations in flight
            self._share = self.affinity or ""
            params["priority"] = self.runtime.fair_share.enter(self._share, self.sampling.tier)
        record.upstream_params = params
        self._span = spans.open_generation(record)
        with tracing.current(self._span[0] if self._span is not None else None):  # the replica's traceparent
            self._stream = await self._open(params)
        record.replica = self._stream.replica.url

    def _structured_outputs(self) -> dict[str, Any]:
        """vLLM's structured outputs for what the request asks for and the custom tools'
        grammars (unless --no-tool-grammars); {} for nothing to enforce."""
        constraint, tools = self.sampling.constraint, self.record.conversation.tools
        if not self.runtime.tool_grammars:  # offered, not enforced
            tools = [dataclasses.replace(tool, grammar=None) for tool in tools]
        elif constraint is None and any(tool.grammar is not None for tool in tools):
            constraint = _GRAMMARS_ONLY
        if constraint is None:
            return {}
        return self.runtime.format.structured_outputs(constraint, tools, thinking=self.record.conversation.thinking)

    def _drop_oldest(self) -> bool:
        """Drop the history's oldest exchange (False: only the last user turn is left). The exact
        earlier tokens no longer fit what is left: the prompt is rendered afresh."""
        record = self.record
        items = record.conversation.items
        cut = next((i for i in range(1, len(items)) if isinstance(items[i], Message) and items[i].role == "user"),
                   None)
        if cut is None:
            return False
        record.conversation = dataclasses.replace(record.conversation, items=items[cut:])
        record.prefix, self._covered = None, None
        record.truncated_items += cut
        return True

    async def _fit(self) -> int:
        """Render the prompt; the room left for output (400 context_length_exceeded: none)."""
        record = self.record
        max_model_len = self.runtime.pool.max_model_len
        requested = self.sampling.max_tokens
        needed = 1 if self.request.max_tokens_cap else (requested or 1)
        if max_model_len is not None:  # refused before rendering when its text alone cannot fit
            bound = too_long(record.conversation, self.runtime.format.max_token_bytes, max_model_len - needed)
            if bound is not None:
                raise context_length_exceeded(bound, max_model_len, needed, at_least=True)
        await self.render()
        if (rollout := self.request.rollout) is not None:
            rollout.check(record)
        prompt_tokens = len(record.prompt_ids) + self._images()
        if max_model_len is not None:
            room = max_model_len - prompt_tokens
            if room < needed:
                raise context_length_exceeded(prompt_tokens, max_model_len, needed)
            return min(requested or room, room)
        return requested or 4096

    def _images(self) -> int:
        """Check the prompt's images (the model takes them, the server's limits, one placeholder in the
        rendered ids for each: vLLM would silently misplace them otherwise) into the record; the
        tokens their placeholders grow by once vLLM expands them."""
        record, chat_format = self.record, self.runtime.format
        images = images_of(record.conversation.items)
        if not images:
            return 0
        if chat_format.image_token_id is None:
            raise text_only("input")
        check_images(images, self.runtime.image_limits)
        at = [i for i, t in enumerate(record.prompt_ids) if t == chat_format.image_token_id]
        if len(at) != len(images):
            raise invalid_request(f"The prompt has {len(images)} images but the chat template wrote {len(at)} "
                                  "image placeholders (an image where the template does not render one).",
                                  param="input", code="image_placeholder_mismatch")
        record.images = images
        record.image_spans = [(i, chat_format.image_tokens(image)) for i, image in zip(at, images, strict=True)]
        return sum(tokens - 1 for _, tokens in record.image_spans)

    async def measure(self) -> int:
        """The length of the prompt `start()` would send, sending nothing: the exact earlier tokens
        it continues spliced in, the new items rendered, each image as vLLM expands its
        placeholder (a count endpoint's answer, equal to the turn's prompt tokens if it ran)."""
        with tracing.phase("gateway.render"):
            await self.render()
            return len(self.record.prompt_ids) + self._images()

    async def render(self) -> Sequence[int]:
        """The prompt (gateway/tokenfix/prompt.py), into the record; renders of big inputs run
        off the event loop. `start()` does this first; the benchmarks stop here."""
        record = self.record
        builder = PromptBuilder(self.runtime.format, record.conversation, record.prefix, self._covered)
        ids = await _off_loop_if_big(builder.new_items, builder.tail) if builder.continued else None
        if ids is None:
            ids = await _off_loop_if_big(record.conversation.items, builder.full)
        record.continued, record.spliced, record.non_monotonic = builder.continued, builder.spliced, \
            builder.non_monotonic or record.degraded is not None or record.client_ids_mismatch is not None
        if builder.non_monotonic:
            log.info("request %s: history does not continue its cached tokens; rendered in full", record.request_id)
        record.prompt_ids = ids
        return ids

    async def _open(self, params: dict) -> UpstreamStream:
        """The generation sent to a replica that accepts it (another one if one refuses); with
        prefill/decode roles in the pool, maybe after a prefill leg on the same ids
        (gateway/upstream/disaggregation.py)."""
        record = self.record

        async def send(replica: Replica, kv: dict | None) -> UpstreamStream:
            record.attempts += 1
            sampling = params if kv is None else {**params, "kv_transfer_params": kv}
            if self.runtime.salt_by_version and "cache_salt" not in sampling:
                sampling = {**sampling, "cache_salt": replica.weight_version}
            return await replica.open(record.prompt_ids, sampling, record.request_id, images=record.images,
                                      model=self.adapter)

        self.prompt_keys()

        def prefill(replica: Replica) -> tuple[str, bytes]:
            body = request_body(replica.api, model=replica.served_model or "", prompt_ids=record.prompt_ids,
                                sampling=prefill_sampling(params), request_id=record.request_id + "-prefill",
                                stream=False)
            return PATHS[replica.api], encode(body)

        pool = self.runtime.pool
        self.use_adapter()
        if record.images or not pool.disaggregated or self.adapter:  # images: vLLM's content_parts, not split
            return await pool.open(lambda r: send(r, None), record.request_id, self.affinity,
                                   prompt_ids=record.prompt_ids, keys=record.prompt_keys, adapter=self.adapter)
        stream, self.legs = await open_legs(pool, send, prefill, record.request_id, self.affinity,
                                            prompt_ids=record.prompt_ids, keys=record.prompt_keys)
        record.split = self.legs.fields() if self.legs is not None else None
        return stream

    def use_adapter(self) -> None:
        """Count the turn among the users of its LoRA adapter until `aclose`: an unload of the
        adapter waits for it (gateway/upstream/control.py)."""
        if self.adapter is not None and not self._using:
            self._using = True
            self.runtime.pool.adapter_users[self.adapter] += 1

    def prompt_keys(self) -> KeyChain | None:
        """The rendered prompt's chunk keys when the router wants them (prefix routing), into the
        record: the prefix's tokens came with theirs, so only what follows them is hashed."""
        record, prefix = self.record, self.record.prefix
        record.prompt_keys = self.runtime.pool.prompt_keys(
            record.prompt_ids, after=(prefix.tokens, prefix.keys) if prefix is not None and prefix.keys else None)
        return record.prompt_keys

    async def _pulled_or_local(self, failed: UpstreamFailed) -> UpstreamStream:
        """The decode leg's stream failed before its first token: a pull that failed (the prefill
        replica gone, its blocks expired) is retried once as a local prefill on the decode replica;
        anything else is raised as it was."""
        legs, record = self.legs, self.record
        if legs is None or not legs.retry or record.first_token_at is not None or legs.decode is None:
            raise failed
        legs.retried()
        record.split = legs.fields()
        assert self._stream is not None and record.upstream_params is not None
        await self._stream.aclose()
        record.attempts += 1
        return await legs.decode.open(record.prompt_ids, record.upstream_params, record.request_id)

    async def relay(self, sink: Sink[list[ParseEvent]]) -> None:
        """The parsed item events, pushed: each read's events go to `sink` from the read
        itself (no task wakes for a token: gateway/upstream/stream.py), which returns None to go
        on or an awaitable to wait for first (a slow client). Returns when the generation ended;
        raises APIError when it failed, and leaving early (cancelled) aborts the upstream request."""
        stream = self._stream
        assert stream is not None, "start() first"
        output = TurnOutput(self.record, self.runtime.format, self.request.spans, self.sampling.stop,
                            self.sampling.constraint)

        def take(chunks: list[TokenChunk | Usage]) -> Hold:
            if output.steered:  # steered before the relay began: nothing read since is the turn's
                return None
            events: list[ParseEvent] = []
            reported = None
            for chunk in chunks:
                events += output.take(chunk)
                if isinstance(chunk, TokenChunk) and chunk.weight_versions is not None:
                    reported = chunk.weight_versions
                if output.stopped or output.steered:
                    stream.stop_relay()
                    break
            self.record.versions_seen(stream.replica.weight_version, reported)
            return handed_on(sink, events) if events else None

        def steer() -> None:  # from the socket's task: what was taken so far is the turn's output
            if output.steer() and self._stream is not None:
                self._stream.stop_relay()

        steering = self.request.steering
        async with self._generating():
            if steering is not None:
                steering.bind(steer)
            try:
                await stream.relay(take)
            except UpstreamFailed as failed:
                stream = self._stream = await self._pulled_or_local(failed)
                await stream.relay(take)
            finally:
                if steering is not None:
                    steering.bind(None)
            if not output.stopped and (events := output.finish()):
                await held(handed_on(sink, events))

    @contextlib.asynccontextmanager
    async def _generating(self) -> AsyncIterator[None]:
        """Around reading the output: how it ended goes into the record, a bug below still ends
        in a clean failure (not a cut stream), and the generation is released however it ends."""
        record = self.record
        try:
            yield
        except _ConsumerFailed as failed:  # the consumer's own failure (a client gone mid-write)
            record.ended_early = "cancelled"
            raise failed.__cause__ from None  # type: ignore[misc]
        except APIError:
            record.ended_early = "failed"
            raise
        except Exception as exc:
            record.ended_early = "failed"
            log.exception("request %s: the turn failed", record.request_id)
            raise APIError("The gateway failed while generating.", status=500, type="server_error",
                           code="server_error") from exc
        except BaseException:  # the client left (GeneratorExit, cancellation)
            record.ended_early = "cancelled"
            raise
        finally:
            record.ended_at = time.perf_counter()
            await self.aclose()

    async def __aenter__(self) -> Self:
        """`start()`; the turn is closed however the block is left (gateway/pipeline/exchange.py)."""
        try:
            await self.start()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release the generation: close its upstream request and abort the replica's work if it
        is unfinished. Every way out calls it (idempotent, and safe under cancellation)."""
        if self._using:
            self._using = False
            self.runtime.pool.adapter_users[self.adapter] -= 1  # type: ignore[index]
        if self._share is not None:
            self.runtime.fair_share.leave(self._share)
            self._share = None
        if self._stream is not None:
            await self._stream.aclose()
        if self._span is not None:
            generation, self._span = self._span, None
            spans.end_generation(generation, self.record, self.runtime.format)


def handed_on(sink: Sink[T], items: T) -> Hold:
    """`items` to a relay's consumer: what it raises, or raises while its hold is awaited, is
    told apart from the turn's own failure (`_generating`)."""
    try:
        hold = sink(items)
    except Exception as exc:
        raise _ConsumerFailed from exc
    return None if hold is None else _Consumers(hold)


class _ConsumerFailed(Exception):
    """What `relay`'s `sink` raised, or what it asked to wait for (a client gone while
    writing, say): raised as it was, not as the turn's own failure."""


class _Consumers:
    """A consumer's hold: awaited, what it raises is the consumer's; closed unawaited (the relay
    was cancelled first), the hold is closed too (no never-awaited coroutine left behind)."""

    __slots__ = ("_hold",)

    def __init__(self, hold: Awaitable[None]) -> None:
        self._hold = hold

    def __await__(self) -> Generator[Any, None, None]:
        try:
            return (yield from self._hold.__await__())
        except Exception as exc:
            raise _ConsumerFailed from exc

    def close(self) -> None:
        if isinstance(self._hold, Coroutine):
            self._hold.close()


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
