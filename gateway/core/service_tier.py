"""OpenAI's `service_tier` as the order a replica serves requests in, and fair sharing of that
order between sessions.

Codex's Fast mode sends `service_tier: "priority"` (OpenAI also takes "fast"), batch-like work
"flex". Stock vLLM orders its waiting requests by the request's `priority` (lower is sooner) when
it runs with `--scheduling-policy priority` (what `vllm-gateway launch` and the local demo start
it with; under vLLM's default "fcfs" the value is ignored, never refused). So a request's
priority is its tier's band plus its rank among its session's generations in flight:

- priority tier: -BAND + rank, default: rank, flex: BAND + rank; a tier always goes before the
  next one, whatever the sessions;
- within a tier, a session's n-th concurrent generation waits behind every other session's
  first ones: one agent bursting 16 requests cannot starve another agent's turn, and a
  subagent (its own session key) shares fairly with its parent.

The response echoes the tier that served it ("priority" for "fast" as OpenAI does, "default"
for "auto" and "scale"). An explicit vLLM `priority` (Chat Completions' extra field, as RL
frameworks send it) is taken as given.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from gateway.core.errors import invalid_request

__all__ = ["BAND", "FairShare", "Tier", "served_order", "served_tier"]

Tier = Literal["priority", "default", "flex"]
BAND = 1 << 20  # ranks stay below this (a session with a million generations in flight shares its band)

_SERVED: dict[str, Tier] = {"auto": "default", "default": "default", "scale": "default", "flex": "flex",
                            "priority": "priority", "fast": "priority", "ultrafast": "priority"}
_BASE: dict[Tier, int] = {"priority": -BAND, "default": 0, "flex": BAND}


def served_tier(raw: object) -> Tier:
    """The tier a request's `service_tier` is served with; 400 for a value OpenAI does not define."""
    if raw is None:
        return "default"
    tier = _SERVED.get(raw) if isinstance(raw, str) else None
    if tier is None:
        raise invalid_request(f"Invalid value for 'service_tier': {raw!r}; expected one of "
                              f"{', '.join(repr(name) for name in _SERVED)}.", param="service_tier",
                              code="invalid_value")
    return tier


def served_order(tier: Tier) -> int:
    """Where `tier` is served: lower first."""
    return _BASE[tier]


class FairShare:
    """The generations in flight per session key; `enter` gives a new one its priority."""

    def __init__(self) -> None:
        self._in_flight: Counter[str] = Counter()

    def enter(self, key: str, tier: Tier) -> int:
        """The priority of a new generation of session `key` (call `leave` once it ends)."""
        rank = self._in_flight[key]
        self._in_flight[key] = rank + 1
        return _BASE[tier] + min(rank, BAND - 1)

    def leave(self, key: str) -> None:
        left = self._in_flight[key] - 1
        if left > 0:
            self._in_flight[key] = left
        else:
            del self._in_flight[key]

    def in_flight(self, key: str) -> int:
        return self._in_flight[key]
