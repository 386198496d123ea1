"""Partial rollouts (AReaL's interruptible generation): a generation the fleet's abort pause cut
is resumed after `/resume` from its prompt plus the tokens it already had, and its client sees
one uninterrupted answer.

A trainer that pauses with `mode=abort` (vLLM's default) ends every running generation with
`finish_reason: "abort"` and whatever it had produced. AReaL's client resumes such a generation
itself (areal/core/remote_inf_engine.py, `agenerate`: while the stop reason is not stop/length it
appends the output to `input_ids`, lowers `max_new_tokens` and sends again); other clients would
lose the work or the sample. With the opt-in (the `partial_rollout` field of a generate request,
or `--partial-rollouts` for all), the gateway does the same on the client's behalf: once the
fleet resumed, the next leg asks for `prompt + output so far` with the limits lowered by what was
produced, and the legs' answers are spliced into one — token ids, logprobs and vLLM's
`weight_versions` spans (each leg's shifted by the tokens before it), so the weights that made
each token are known, which is what off-policy correction needs — and vLLM's `routed_experts`
(the MoE routing of every forwarded position, from `routed_experts_prompt_start` on, which
routing replay trains with): a next leg asks for its rows from where the leg before's ended (the
positions the cut leg forwarded are its, made by the weights that made its tokens; the resumed
leg's prefill of them again is not), and the answer carries every leg's rows in order, as one
uninterrupted generation's would be shaped.

Only what a continuation reproduces exactly is resumed, all of it decided at the token level:
`output_mode: "tokens"`, one sample (`n` 1), no stop strings (one may straddle the splice and
vLLM matches them in the new leg's text only), no structured outputs (the grammar's state is
lost), no presence/frequency penalty or `bad_words`, `thinking_token_budget`,
`repetition_detection` (they count the output, which becomes prompt), no `prompt_logprobs` (they
would cover the output), no client-driven `kv_transfer_params`. Asked for explicitly, anything
else is a 400 naming the field; under the gateway flag it falls back to vLLM's abort, as before.
A seeded sample continues with its seed restarted: still a sample of the policy, not the draws an
uninterrupted run would have made.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np

__all__ = ["Splice", "refusal"]

_COUNTING = ("presence_penalty", "frequency_penalty")
_UNSPLICEABLE = ("structured_outputs", "bad_words", "thinking_token_budget", "repetition_detection",
                 "prompt_logprobs", "guided_json", "guided_regex", "guided_choice", "guided_grammar")


def refusal(body: dict[str, Any]) -> tuple[str, str] | None:
    """Why a `/inference/v1/generate` body cannot be resumed exactly, as (param, reason); None: it can."""
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        return "sampling_params", "it is not an object"
    if body.get("output_mode", "tokens") != "tokens":
        return "output_mode", "text output cannot be spliced token-exactly (ask for tokens)"
    if params.get("n", 1) != 1:
        return "sampling_params.n", "only one sample (n = 1) can be resumed"
    if params.get("stop"):
        return "sampling_params.stop", "a stop string may straddle the splice, where vLLM would not match it"
    for name in _COUNTING:
        if params.get(name):
            return f"sampling_params.{name}", "it counts the output so far, which the resumed leg sees as prompt"
    for name in _UNSPLICEABLE:
        if params.get(name) not in (None, [], {}):
            return f"sampling_params.{name}", "its state over the output so far is not carried into a new request"
    if body.get("kv_transfer_params") is not None:
        return "kv_transfer_params", "a client-driven KV transfer cannot be resumed by the gateway"
    return None


class Splice:
    """One generation's legs, spliced: the next leg's body, and each leg's answer rewritten so the
    client reads one generation (`prompt_ids`: the client's prompt; `default_max_tokens`: the
    server's output limit when the request names none — vLLM's generation_config default)."""

    def __init__(self, prompt_ids: list[int], default_max_tokens: int | None) -> None:
        self.prompt_ids = prompt_ids
        self.default_max_tokens = default_max_tokens
        self.before_ids: list[int] = []  # the earlier legs' output
        self.before_logprobs: list[Any] = []  # their `logprobs.content` entries
        self.before_spans: list[dict[str, Any]] = []  # their weight-version spans
        self.before_experts: np.ndarray | None = None  # their `routed_experts` rows, when vLLM returns them
        self.legs = 1

    @property
    def resumed(self) -> bool:
        return self.legs > 1

    def next_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The request that continues the generation after `before_ids`."""
        done = len(self.before_ids)
        params = dict(body.get("sampling_params") or {})
        limit = params.get("max_tokens", self.default_max_tokens)
        if limit is not None:
            params["max_tokens"] = max(limit - done, 1)
        if params.get("min_tokens"):
            params["min_tokens"] = max(params["min_tokens"] - done, 0)
        if self.before_experts is not None:  # the rows of the positions the legs before forwarded are theirs
            params["routed_experts_prompt_start"] = params.get("routed_experts_prompt_start", 0) + \
                len(self.before_experts)
        return {**body, "token_ids": self.prompt_ids + self.before_ids, "sampling_params": params}

    def cut(self, choice: dict[str, Any], spans: list[dict[str, Any]] | None, ids: list[int]) -> None:
        """A leg ended by the abort pause after `ids` (all its output): its choice no longer ends
        the answer; its tokens, logprobs and `spans` are kept for the legs after it."""
        done = len(self.before_ids)
        self.before_spans = join(self.before_spans, spans or [], done)
        self.before_ids.extend(ids)
        content = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
        self.before_logprobs.extend(content or ())
        if choice.get("routed_experts") is not None:
            self.before_experts = _rows(self.before_experts, choice["routed_experts"])
        choice.update(finish_reason=None, stop_reason=None, weight_versions=None, routed_experts=None)
        self.legs += 1

    def head(self, event: dict[str, Any]) -> None:
        """A later leg's event (or whole answer) as part of the first leg's: the client's prompt,
        and usage over the whole output."""
        done = len(self.before_ids)
        if event.get("prompt_token_ids") is not None:
            event["prompt_token_ids"] = self.prompt_ids
        if isinstance(usage := event.get("usage"), dict):
            completion = usage.get("completion_tokens", 0) + done
            usage.update(prompt_tokens=len(self.prompt_ids), completion_tokens=completion,
                         total_tokens=len(self.prompt_ids) + completion)

    def choice(self, choice: dict[str, Any], *, whole: bool) -> None:
        """A later leg's choice as the generation's: its spans moved past the earlier legs' and
        joined to theirs; `whole` (a non-streamed answer), the earlier ids and logprobs in front."""
        if choice.get("weight_versions") is not None:
            choice["weight_versions"] = join(self.before_spans, choice["weight_versions"], len(self.before_ids))
        if self.before_experts is not None and (choice.get("routed_experts") is not None
                                                or choice.get("finish_reason") is not None):
            choice["routed_experts"] = _npy(_rows(self.before_experts, choice.get("routed_experts")))
        if not whole:
            return
        choice["token_ids"] = self.before_ids + list(choice.get("token_ids") or ())
        if isinstance(logprobs := choice.get("logprobs"), dict) and isinstance(logprobs.get("content"), list):
            logprobs["content"] = self.before_logprobs + logprobs["content"]


def join(before: list[dict[str, Any]], after: list[dict[str, Any]], offset: int) -> list[dict[str, Any]]:
    """`before`'s spans, then `after`'s moved `offset` tokens on; a span continuing the same version
    is merged into the one before it."""
    spans = [dict(span) for span in before]
    for span in after:
        moved = {**span, "start": span["start"] + offset, "end": span["end"] + offset}
        if spans and spans[-1]["version"] == moved["version"] and spans[-1]["end"] == moved["start"]:
            spans[-1]["end"] = moved["end"]
        else:
            spans.append(moved)
    return spans


def _rows(before: np.ndarray | None, encoded: str | None) -> np.ndarray:
    """`before`'s routing rows, then those of vLLM's `encoded` answer (base64 `.npy`: positions ×
    layers × experts per token) after them."""
    if encoded is None:
        assert before is not None
        return before
    rows = np.load(io.BytesIO(base64.b64decode(encoded)), allow_pickle=False)
    return rows if before is None else np.concatenate((before, rows), axis=0)


def _npy(rows: np.ndarray) -> str:
    """`rows` as vLLM encodes them (vllm/utils/serial_utils.py `numpy2base64`)."""
    with io.BytesIO() as buffer:
        np.save(buffer, rows, allow_pickle=False)
        return base64.b64encode(buffer.getvalue()).decode("ascii")
