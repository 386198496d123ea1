"""Which replica gets a request: the scoring rules, over what the router knows.

`choose` (the default, prefix-aware): the replica holding the longest prefix of the prompt
in its KV cache (gateway/upstream/prefix_index.py), among those within the load bound;
equal prefixes go to the least loaded. A continuing session is a long prefix match, so it
stays where its cache is. A prompt with a long part no replica holds (a new GRPO group, a
new session's own context) is a new branch: it goes where the fewest were placed, so
groups and sessions spread evenly and their later requests follow them. The bound is that
of "Consistent Hashing with Bounded Loads" (Mirrokni, Thorup, Zadimoghaddam): a replica
already holding `load_factor` × the average load (in flight and queued) plus `LOAD_SLACK`
requests takes no more while another has room, so a popular prefix spills over to a second
replica instead of queueing on one. A replica whose KV cache is full (it would preempt) is
passed over while another is not.

`pick` (`--routing session`, the rule before the cache was known): a session goes to its
replica by rendezvous hashing (a replica joining or leaving moves only the sessions it gains
or held), walked with the bound (no slack); requests without a key go to the least busy one.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Protocol, TypeVar

__all__ = ["LOAD_FACTOR", "Routable", "choose", "pick", "ranked"]

LOAD_FACTOR = 1.25
# Requests a replica may run beyond the bound: at small counts the bound's granularity would
# split a GRPO group of 8 for being 1–2 ahead, while vLLM batches that many in one step.
LOAD_SLACK = 4
KV_FULL = 0.98  # kv_cache_usage_perc from which a replica's cache counts as full


class Routable(Protocol):
    url: str
    inflight: int
    requests: int


R = TypeVar("R", bound=Routable)


def pick(candidates: Sequence[R], affinity: str | None = None, *,
         load_factor: float = LOAD_FACTOR) -> R:
    """`candidates` must be non-empty (the routable replicas)."""
    if affinity is None:
        # Ties go to the replica that served fewer requests, so idle replicas take turns.
        return min(candidates, key=lambda r: (r.inflight, r.requests))
    bound = capacity(candidates, load_factor)
    return next(r for r in ranked(affinity, candidates) if r.inflight < bound)


def capacity(candidates: Sequence[Routable], load_factor: float = LOAD_FACTOR) -> int:
    """In-flight requests a replica may hold before the new one: ⌈c·(m+1)/n⌉ for m in flight.
    Some replica is always under it, since not all n can hold more than the m+1 total."""
    total = sum(r.inflight for r in candidates) + 1
    return math.ceil(load_factor * total / len(candidates))


def ranked(affinity: str, candidates: Sequence[R]) -> list[R]:
    """The key's preference order over replicas; stable while the set of replicas is."""
    return sorted(candidates, key=lambda r: _weight(affinity, r.url), reverse=True)


def _weight(key: str, url: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}|{url}".encode(), digest_size=8).digest(), "big")


def choose(candidates: Sequence[R], matched: Sequence[int], loads: Sequence[int],
           affinity: str | None = None, *, kv_usage: Sequence[float] | None = None, tie: int = 0,
           sticky: R | None = None, placing: bool = False, placed: Sequence[int] | None = None,
           load_factor: float = LOAD_FACTOR) -> tuple[R, str]:
    """The replica for a prompt and why. `matched[i]`: how much of the prompt candidate i holds
    (any unit: prefixes within `tie` of the longest count as equal, and one no longer than
    `tie` as nothing); `loads[i]`: its requests in flight and queued; `sticky`: where the
    session (`affinity`) went last. A new branch (`placing`: more than `tie` of the prompt is
    held nowhere — a new group's prompt, a new session's own context) goes where the fewest
    were placed (`placed[i]`), so groups and sessions spread evenly; then to the longer prefix,
    the least loaded. Otherwise, among equal prefixes the least loaded wins, then the
    session's last replica, then the longer prefix, then (no session) the replica that served
    fewer requests or the session key's consistent-hash order (a short keyed prompt goes where
    its key says, from any process). Reasons: "placed" (a new branch), "prefix" (the longest
    held prefix), "session" or "least-loaded" (a short prompt nothing of which is held),
    "prefix-spilled" (a longer prefix is held by replicas over the bound)."""
    n = len(candidates)
    bound = math.ceil(load_factor * (sum(loads) + 1) / n) + LOAD_SLACK
    room = [i for i in range(n) if loads[i] < bound]  # never empty: not every load can be ≥ the bound
    if kv_usage is not None and (roomy := [i for i in room if kv_usage[i] < KV_FULL]):
        room = roomy
    if placing:
        chosen = min(room, key=lambda i: (placed[i] if placed is not None else 0, -matched[i], loads[i],
                                          candidates[i].requests))
        return candidates[chosen], "placed"
    best = max(matched[i] for i in room)
    top = [i for i in room if matched[i] >= best - tie]
    held = best > tie
    if affinity is None:
        order = {i: candidates[i].requests for i in top}
    else:
        ranking = ranked(affinity, [candidates[i] for i in top])
        order = {i: ranking.index(candidates[i]) for i in top}
    chosen = min(top, key=lambda i: (loads[i], kv_usage[i] if kv_usage is not None else 0.0,
                                     candidates[i] is not sticky, -matched[i] if held else 0, order[i]))
    if best < max(matched) - tie:
        return candidates[chosen], "prefix-spilled"
    return candidates[chosen], "prefix" if held else "session" if affinity is not None else "least-loaded"
