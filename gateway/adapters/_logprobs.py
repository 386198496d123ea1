"""Logprob entries as OpenAI's APIs show them: token text, its bytes, alternatives.

The gateway asks vLLM for token ids only, so the text of each token is the format's own
(`ChatFormat.token_bytes`): `bytes` are the token's bytes, `token` their UTF-8 decoding
(U+FFFD where a token holds part of a character, as OpenAI's do). Used by the Responses
API (per `output_text` part) and by Chat Completions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.formats.base import ChatFormat
from gateway.tokenfix.record import TurnRecord

__all__ = ["entries"]


def entries(chat_format: ChatFormat, record: TurnRecord, start: int = 0, end: int | None = None, *,
            as_ids: bool = False) -> list[dict[str, Any]]:
    """The entries of output positions [start, end) of a turn that asked for logprobs; `as_ids`:
    each `token` is "token_id:N" (vLLM's `return_tokens_as_token_ids`; `bytes` stay the token's)."""
    logprobs = record.logprobs or []
    end = min(len(logprobs), len(record.output_ids)) if end is None else min(end, len(logprobs))
    top = record.top_logprobs
    out = []
    for position in range(start, end):
        entry = _entry(chat_format, record.output_ids[position], logprobs[position], as_ids)
        entry["top_logprobs"] = _alternatives(chat_format, top[position], as_ids) if top and position < len(top) \
            else []
        out.append(entry)
    return out


def _alternatives(chat_format: ChatFormat, top: Sequence[tuple[int, float]], as_ids: bool) -> list[dict[str, Any]]:
    return [_entry(chat_format, token, logprob, as_ids) for token, logprob in top]


def _entry(chat_format: ChatFormat, token: int, logprob: float, as_ids: bool) -> dict[str, Any]:
    raw = chat_format.token_bytes(token)
    text = f"token_id:{token}" if as_ids else raw.decode("utf-8", "replace")
    return {"token": text, "logprob": logprob, "bytes": list(raw)}
