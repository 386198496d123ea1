"""What a replica streams back, independent of which vLLM endpoint produced it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TokenChunk", "Usage"]


@dataclass(slots=True)
class TokenChunk:
    """New output tokens. `logprobs` is parallel to `token_ids` when logprobs were asked for.

    `top_logprobs[i]` lists (token_id, logprob) candidates for position i when requested.
    """

    token_ids: list[int]
    logprobs: list[float] | None = None
    top_logprobs: list[list[tuple[int, float]]] | None = None
    finish_reason: str | None = None  # "stop" | "length" | "abort" on the last chunk
    stop_reason: int | str | None = None
    # vLLM's `weight_versions` ({version, start, end} over output indexes), on the last chunk of
    # /inference/v1/generate only.
    weight_versions: list[dict] | None = None
    # With images on /inference/v1/generate (asked with `return_token_ids`), on the first chunk: the
    # prompt ids as vLLM's processor expanded the placeholders, and where (`mm_placeholders`).
    expanded_prompt: list[int] | None = None
    mm_placeholders: dict[str, list[dict]] | None = None

    def extend(self, later: TokenChunk) -> None:
        """Append the chunk that came after this one (several read at once are relayed as one)."""
        self.token_ids += later.token_ids
        if later.expanded_prompt is not None:
            self.expanded_prompt, self.mm_placeholders = later.expanded_prompt, later.mm_placeholders
        if later.logprobs is not None:
            if self.logprobs is None:
                self.logprobs = []
            self.logprobs += later.logprobs
        if later.top_logprobs is not None:
            if self.top_logprobs is None:
                self.top_logprobs = []
            self.top_logprobs += later.top_logprobs
        if later.finish_reason is not None:
            self.finish_reason = later.finish_reason
            self.stop_reason = later.stop_reason
            self.weight_versions = later.weight_versions


@dataclass(slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None = None
