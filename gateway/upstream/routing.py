"""Which replica gets a request.

A session (affinity key) goes to the replica that holds its prefix cache: replicas are
ranked per key by rendezvous hashing (highest random weight), so a replica joining or
leaving moves only the sessions it gains or held. The ranking is walked with bounded
loads (Mirrokni, Thorup, Zadimoghaddam, "Consistent Hashing with Bounded Loads"): a
replica already holding more than `load_factor` × the average in-flight count is
skipped, so one hot session cannot pile onto one replica. Requests without a key go to
the replica with the fewest requests in flight.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Protocol, TypeVar

LOAD_FACTOR = 1.25


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
