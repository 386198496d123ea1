"""Outlier detection: which failing replicas leave the pool, for how long, and never all of them.

One failed stream must not take a replica out (with one replica, that refused every client
until the next health check), so ejection is graded as in Envoy's outlier detection:

- `consecutive_failures` failed requests in a row (5xx answers, connections closed before
  or during a stream, malformed events, in-stream errors) eject; a success resets the run;
- a failure percentage of at least `failure_percentage` over the current `interval`, once
  the replica served `failure_request_volume` requests in it, ejects;
- a replica that refuses connections or stalls once connected is ejected at once
  (`Replica.eject`); a connection that times out is only a failure here (a busy replica on a
  loaded host accepts late; it is not gone);
- outlier ejections never take more than `max_ejection_percent` of the pool (a replica
  over it stays, and the overflow is counted); when no replica is routable at all, requests
  go to the ejected ones anyway (panic routing) rather than all answering 503;
- an ejection lasts `base_ejection_time` × the replica's ejection count (capped at
  `max_ejection_time`); the count drops by one for every `interval` the replica stays in,
  so a flapping replica stays out longer each time and a recovered one is forgiven.
  Readmission is the health check's: /health, the model list and a warmup generation.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

__all__ = ["EJECTION_KINDS", "OutlierDetector", "OutlierPolicy", "OutlierRecord"]

log = logging.getLogger(__name__)

# Why a replica is ejected (`Replica.eject`'s `kind`): each is exported from the start, at 0, so
# an alert on its increase sees the first ejection too (a counter series that appears at 1 has not
# increased, for Prometheus).
EJECTION_KINDS = ("consecutive_failures", "failure_rate", "unreachable", "stalled", "health_check")


@dataclass(frozen=True)
class OutlierPolicy:
    consecutive_failures: int = 5  # failed requests in a row that eject (0: never)
    failure_percentage: float = 50.0  # failed share of an interval's requests that ejects (0: never)
    failure_request_volume: int = 20  # requests in the interval before the percentage counts
    interval: float = 10.0  # seconds: the failure-rate window; and the ejection count decays by one per interval
    base_ejection_time: float = 10.0  # seconds out after a first ejection; multiplied by the ejection count
    max_ejection_time: float = 300.0
    max_ejection_percent: float = 50.0  # of the pool that outlier detection may have out at once


@dataclass
class OutlierRecord:
    """One replica's counts, kept on the replica."""

    consecutive: int = 0  # failures since the last success
    window_start: float = 0.0
    window_requests: int = 0
    window_failures: int = 0
    multiplier: int = 0  # ejections not yet forgiven
    held_until: float = 0.0  # monotonic time before which the health check does not readmit it
    readmitted_at: float = 0.0
    ejections: Counter[str] = field(default_factory=Counter)  # by kind: consecutive_failures, failure_rate, …
    last_ejection_time: float = 0.0  # seconds the last ejection held the replica out
    last_reason: str = ""  # why it was last ejected (the status page shows it beside its state)
    last_kind: str = ""
    last_ejected_at: float = 0.0  # wall-clock time of that ejection


class Ejectable(Protocol):
    url: str
    state: str
    served_model: str | None
    outlier: OutlierRecord

    def eject(self, reason: str, *, kind: str = ..., hold: bool = ...) -> None: ...


R = TypeVar("R", bound=Ejectable)


class OutlierDetector:
    """The pool's detector: counts each replica's outcomes and ejects by `policy`."""

    def __init__(self, policy: OutlierPolicy | None = None) -> None:
        self.policy = policy or OutlierPolicy()
        self.members: Sequence[Ejectable] = ()  # the pool's replicas (the pool keeps it current)
        self.overflow = 0  # ejections not made because max_ejection_percent was reached
        self.panic_routes = 0  # requests routed to an ejected replica because none was routable
        self._panicking = False

    def record(self, replica: Ejectable, failure: str | None) -> None:
        """A request on `replica` ended: `failure` is why it failed, None when it succeeded."""
        policy, stats = self.policy, replica.outlier
        now = time.monotonic()
        if now - stats.window_start >= policy.interval:
            stats.window_start, stats.window_requests, stats.window_failures = now, 0, 0
        stats.window_requests += 1
        if failure is None:
            stats.consecutive = 0
            return
        stats.consecutive += 1
        stats.window_failures += 1
        if replica.state != "ready":
            return
        if policy.consecutive_failures and stats.consecutive >= policy.consecutive_failures:
            kind, why = "consecutive_failures", f"{stats.consecutive} failed requests in a row (last: {failure})"
        elif (policy.failure_percentage and stats.window_requests >= policy.failure_request_volume
              and 100.0 * stats.window_failures / stats.window_requests >= policy.failure_percentage):
            kind = "failure_rate"
            why = (f"{stats.window_failures} of {stats.window_requests} requests failed within "
                   f"{policy.interval:g} s (last: {failure})")
        else:
            return
        if not self._may_eject():
            self.overflow += 1
            log.warning("replica %s is not ejected although %s: more than --outlier-max-ejection-percent=%g%% "
                        "of the pool would be out; it keeps serving", replica.url, why, policy.max_ejection_percent)
            return
        replica.eject(why, kind=kind, hold=True)

    def ejected(self, replica: Ejectable, reason: str, kind: str, hold: bool) -> None:
        """`replica` was just ejected: count it, and how long it stays out (`hold`: at least the
        ejection time, else until its health check passes)."""
        policy, stats = self.policy, replica.outlier
        now = time.monotonic()
        if stats.readmitted_at and policy.interval > 0:  # forgiven one ejection per interval it stayed in
            stats.multiplier = max(0, stats.multiplier - int((now - stats.readmitted_at) / policy.interval))
        stats.multiplier += 1
        stats.consecutive = 0
        stats.window_start, stats.window_requests, stats.window_failures = now, 0, 0
        stats.ejections[kind] += 1
        stats.last_reason, stats.last_kind, stats.last_ejected_at = reason, kind, time.time()
        seconds = min(policy.base_ejection_time * stats.multiplier, policy.max_ejection_time) if hold else 0.0
        stats.held_until = now + seconds
        stats.last_ejection_time = seconds
        total = sum(stats.ejections.values())
        log.warning("replica %s ejected (%s, ejection %d%s): %s", replica.url, kind, total,
                    f", out for at least {seconds:g} s" if hold else ", until its health check passes", reason)

    def readmitted(self, replica: Ejectable) -> None:
        replica.outlier.readmitted_at = time.monotonic()
        replica.outlier.consecutive = 0
        self._panicking = False

    def panic(self, replicas: Sequence[R]) -> list[R]:
        """Where requests go when no replica is routable: the ejected ones that served before."""
        chosen = [r for r in replicas if r.state == "ejected" and r.served_model is not None]
        if chosen:
            self.panic_routes += 1
            if not self._panicking:
                self._panicking = True
                log.warning("every replica is ejected: routing to the ejected ones anyway (panic mode) until one "
                            "is readmitted")
        return chosen

    def _may_eject(self) -> bool:
        members = [r for r in self.members if r.state != "draining"]
        out = sum(r.state == "ejected" for r in members)
        return bool(members) and 100.0 * (out + 1) / len(members) <= self.policy.max_ejection_percent
