"""What one model call did, as data: the record a turn leaves behind.

A `Turn` (gateway/pipeline/turn.py) streams; this is what it wrote down while it did —
the exact prompt and output ids, how the prompt was made, what ended the generation,
timings. The transport hands it to observability (the access log and metrics) and the
session module commits it (session state, stored response, rollout). It holds no stream,
no request and no exception, so whoever keeps it keeps plain data only.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.core.conversation import Conversation, Item, Message
from gateway.core.image import Image
from gateway.tokenfix.state import TokenState
from gateway.upstream.chunks import Usage
from gateway.upstream.prefix_index import KeyChain

__all__ = ["TurnRecord"]


@dataclass(eq=False, slots=True)
class TurnRecord:
    request_id: str  # the id the replica knows the generation by
    model: str
    conversation: Conversation  # the history the prompt rendered
    prefix: TokenState | None = None  # the exact earlier tokens the prompt was offered to continue
    continued: bool = False  # the history starts with all of `prefix`'s items
    prompt_ids: Sequence[int] = ()  # a list, or an int32 array when spliced onto exact tokens
    spliced: bool = False  # the prompt reuses `prefix`'s exact tokens
    prompt_keys: KeyChain | None = None  # its chunk keys, when routing by prefix (kept with the turn's tokens)
    non_monotonic: bool = False  # a prefix was offered, but the history does not continue it
    # The shared state store could not be read (unreachable, full): the exact earlier tokens it
    # holds were not offered, so the prompt was rendered in full (counted as non_monotonic too).
    degraded: str | None = None
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None  # one per output id, when asked for
    top_logprobs: list[list[tuple[int, float]]] | None = None  # per output id: the top (id, logprob)s
    finish_reason: str | None = None  # stop | length | abort | steered; None: not finished
    usage: Usage | None = None
    reasoning_tokens: int = 0
    output_items: list[Item] = field(default_factory=list)  # the model's output as canonical items
    attempts: int = 0  # replicas asked to take the prompt: more than one means retries
    replica: str | None = None  # the URL of the replica that accepted the prompt
    split: dict[str, Any] | None = None  # prefill/decode disaggregation's decision and legs (`Legs.fields`)
    first_token_at: float | None = None  # time.perf_counter() of the first output token
    started_at: float | None = None  # time.perf_counter() when the turn began…
    ended_at: float | None = None  # …and when its generation ended
    upstream_params: dict | None = None  # the sampling parameters sent upstream (defaults applied)
    # Why the client's own ids (NeMo-RL's convention) were not used: they do not cover the history.
    client_ids_mismatch: str | None = None
    ended_early: str | None = None  # "failed" | "cancelled" when the stream stopped before its end
    stop_string: str | None = None  # the request's stop string that ended the generation
    truncated_items: int = 0  # oldest history items dropped to fit the context (truncation: auto)
    images: list[Image] = field(default_factory=list)  # the prompt's images, one placeholder each, in order
    # Per image: where its placeholder is in `prompt_ids` and the tokens vLLM expands it to (counted here).
    image_spans: list[tuple[int, int]] = field(default_factory=list)
    # Per image: the ids vLLM's processor put in its placeholder's place (`expanded`); None: not reported.
    image_expansions: list[list[int]] | None = None
    # Tools the gateway ran between the previous generation and this one (remote MCP calls), whose
    # outputs this prompt added: server_label, name, seconds, error (None when it succeeded).
    tool_calls: list[dict[str, Any]] | None = None
    # Which weights produced which output tokens, in vLLM's shape ({version, start, end} over output
    # indexes): vLLM's own spans where the replica reported them (/inference/v1/generate), else the
    # gateway's, from the version its replica served as each read of tokens arrived.
    weight_versions: list[dict[str, Any]] | None = None
    versions_reported: bool = False  # `weight_versions` are vLLM's own

    def versions_seen(self, version: str, reported: list[dict[str, Any]] | None = None) -> None:
        """The output tokens since the last call came from `version`; `reported`: vLLM's spans
        for the whole output, which replace the gateway's."""
        if reported is not None:
            self.weight_versions, self.versions_reported = reported, True
        if self.versions_reported:
            return
        spans, end = self.weight_versions, len(self.output_ids)
        if spans is None:
            spans = self.weight_versions = []
        start = spans[-1]["end"] if spans else 0
        if end == start:
            return
        if spans and spans[-1]["version"] == version:
            spans[-1]["end"] = end
        else:
            spans.append({"version": version, "start": start, "end": end})

    def expanded(self, prompt: list[int], placeholders: dict[str, list[dict]] | None) -> None:
        """vLLM's prompt as its processor expanded the image placeholders, and where its image
        ranges are (`mm_placeholders`): kept per image, as the ids that took its placeholder's place,
        only when they account for all of vLLM's prompt (the rest is this prompt, token for token)."""
        ranges = (placeholders or {}).get("image") or []
        if len(ranges) != len(self.image_spans):
            return
        ours, expansions, cursor, after = self.prompt_ids, [], 0, 0  # cursor: in vLLM's prompt; after: in ours
        for (at, _), placed in zip(self.image_spans, ranges, strict=True):
            start, end = cursor + at - after, placed["offset"] + placed["length"]
            if not start <= placed["offset"] or list(ours[after:at]) != prompt[cursor:start]:
                return
            expansions.append(prompt[start:end])
            cursor, after = end, at + 1
        if list(ours[after:]) == prompt[cursor:]:
            self.image_expansions = expansions

    @property
    def turn_items(self) -> list[Item]:
        """The model's turn as the history holds it: a generation with no visible item (only
        whitespace, say) is still an assistant turn that the next prompt must contain."""
        return self.output_items or [Message(role="assistant", text="")]

    @property
    def finished(self) -> bool:
        """The generation ended normally (or was steered): its tokens are history a next turn may continue."""
        return self.finish_reason in ("stop", "length", "steered")

    def token_state(self, terminators: Collection[int]) -> TokenState | None:
        """The exact tokens of this turn for the next one to continue; None unless it finished."""
        if not self.finished:
            return None
        conversation, prefix = self.conversation, self.prefix
        # A continued history extends its prefix's digest: the cost follows the new items.
        after = prefix if self.continued and prefix is not None and prefix.history_hash is not None else None
        items = conversation.items[after.items:] if after is not None else conversation.items
        return TokenState.build(conversation, [*items, *self.turn_items], self.prompt_ids, self.output_ids,
                                terminators, after=after, keys=self.prompt_keys)

    @property
    def stop_token_id(self) -> int | None:
        """The stop id the model ended its turn with (None: cut by the length limit, or a stop string)."""
        stops = (self.upstream_params or {}).get("stop_token_ids") or ()
        if self.finish_reason == "stop" and self.output_ids and self.output_ids[-1] in stops:
            return self.output_ids[-1]
        return None

    @property
    def stop_reason(self) -> int | str | None:
        """What ended the generation, as vLLM's `stop_reason`: the stop string, else the stop id
        (any of the format's, the model's end-of-text included), else None (length, abort)."""
        return self.stop_string if self.stop_string is not None else self.stop_token_id

    @property
    def prompt_token_ids(self) -> list[int]:
        """`prompt_ids` as a list, for JSON."""
        ids = self.prompt_ids
        return ids.tolist() if isinstance(ids, array) else list(ids)

    @property
    def input_tokens(self) -> int:
        """The prompt's tokens; with images, as vLLM expanded their placeholders (its usage)."""
        if self.images and self.usage is not None and self.usage.prompt_tokens:
            return self.usage.prompt_tokens
        return len(self.prompt_ids)

    @property
    def cached_tokens(self) -> int:
        return (self.usage.cached_tokens or 0) if self.usage else 0
