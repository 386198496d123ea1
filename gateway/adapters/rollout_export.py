"""A rollout's trajectory in the shapes trainers consume, so nothing is converted by hand.

The gateway's own export (`GET /v1/rollouts/{id}`) spans the whole token sequence, with
`null` logprobs on prompt tokens and possibly several segments. Trainers want one sample
per sequence the model really saw, split into the prompt and everything after it:

- **verl** `AgentLoopOutput` (verl/experimental/agent_loop): `prompt_ids`, `response_ids`,
  `response_mask` (1 = the model's tokens, 0 = tool output and template), `response_logprobs`
  (0.0 on masked tokens, as verl's tool agent loop pads them), `num_turns`, `metrics`,
  `extra_fields`; its three response lists are equally long.
- **slime** `Sample` (slime/utils/types.py): `tokens` (prompt + response), `response_length`,
  `loss_mask` and `rollout_log_probs` over the response only (0.0 on masked tokens, as slime's
  multi-turn examples pad them), `response` text, `status`.

One sample per segment; the split is at the segment's first prompt (its first turn's
`prompt_end`), so later prompt deltas (tool outputs, the next header) are response tokens
with mask 0. The per-turn audit trail goes along in `extra_fields` / `metadata`, with the weight
version of each response token (`weight_versions`) for off-policy correction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from gateway.core.errors import invalid_request

__all__ = ["check_format", "samples"]

FORMATS = ("gateway", "verl", "slime")

Decode = Callable[[Sequence[int]], str]


def check_format(value: str | None) -> str:
    if value is None:
        return "gateway"
    if value not in FORMATS:
        raise invalid_request(f"Invalid 'format': {value!r}; expected one of {', '.join(FORMATS)}.",
                              param="format", code="invalid_value")
    return value


def samples(export: dict[str, Any], trainer: str, decode: Decode) -> list[dict[str, Any]]:
    """The trajectory `export` (the gateway's shape) as `trainer`'s samples, one per segment."""
    shape = _verl if trainer == "verl" else _slime
    return [shape(export, *part, decode) for part in _segments(export)]


def _segments(export: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any], list[dict[str, Any]], int]]:
    turns = export["turns"]
    for index, segment in enumerate(export["segments"]):
        own = [turn for turn in turns if turn["segment"] == index]
        yield index, segment, own, turns[segment["first_turn"]]["prompt_end"]


def _response(export: dict[str, Any], segment: dict[str, Any], split: int) -> tuple[list[int], list[float]]:
    mask = export["loss_mask"][split:segment["end"]]
    logprobs = [0.0 if value is None else value for value in export["logprobs"][split:segment["end"]]]
    return mask, logprobs


def _audit(export: dict[str, Any], index: int, segment: dict[str, Any], turns: list[dict[str, Any]], split: int
           ) -> dict[str, Any]:
    """The per-turn trail, and per response token the weight version that generated it (None: not the
    model's, or generated before versions were recorded)."""
    return {"rollout_id": export["id"], "segment": index, "start": segment["start"],
            "turns": [{key: turn.get(key) for key in _AUDIT} for turn in turns],
            "weight_versions": (export.get("weight_versions") or [None] * segment["end"])[split:segment["end"]]}


_AUDIT = ("index", "finish_reason", "stop_token_id", "stop_reason", "non_monotonic", "replica", "request_id",
          "sampling", "timing", "weight_versions")


def _verl(export: dict[str, Any], index: int, segment: dict[str, Any], turns: list[dict[str, Any]], split: int,
          decode: Decode) -> dict[str, Any]:
    tokens = export["token_ids"]
    mask, logprobs = _response(export, segment, split)
    sample = {"prompt_ids": tokens[segment["start"]:split], "response_ids": tokens[split:segment["end"]],
              "response_mask": mask, "response_logprobs": logprobs, "num_turns": len(turns),
              "metrics": {}, "extra_fields": _audit(export, index, segment, turns, split)}
    if images := _images(turns, segment):
        sample["multi_modal_data"] = {"image": [image["url"] for image in images]}  # verl's field, in order
        sample["extra_fields"]["images"] = images
    return sample


def _slime(export: dict[str, Any], index: int, segment: dict[str, Any], turns: list[dict[str, Any]], split: int,
           decode: Decode) -> dict[str, Any]:
    tokens = export["token_ids"][segment["start"]:segment["end"]]
    mask, logprobs = _response(export, segment, split)
    truncated = bool(turns) and turns[-1]["finish_reason"] == "length"
    return {"prompt": decode(export["token_ids"][segment["start"]:split]), "tokens": tokens,
            "response_length": len(mask), "response": decode(export["token_ids"][split:segment["end"]]),
            "loss_mask": mask,
            "rollout_log_probs": logprobs, "status": "truncated" if truncated else "completed",
            "metadata": _audit(export, index, segment, turns, split),
            **({"multimodal_inputs": {"images": [i["url"] for i in images]}}  # slime's field, in order
               if (images := _images(turns, segment)) else {})}


def _images(turns: list[dict[str, Any]], segment: dict[str, Any]) -> list[dict[str, Any]]:
    """The segment's images once each, in placeholder order (every call resends the earlier ones),
    with offsets into the segment's tokens."""
    found: dict[int, dict[str, Any]] = {}
    for turn in turns:
        for image in turn.get("images") or ():
            found.setdefault(image["placeholder"], {**image, "placeholder": image["placeholder"] - segment["start"]})
    return [found[at] for at in sorted(found)]
