"""The last minutes of traffic, for the status page (gateway/server/_status.py).

Prometheus keeps history for a fleet; an operator looking at one gateway without it still
wants to see whether requests are flowing, how long the first token takes and how fast the
rest come. `Recent` keeps that for the last `steps × step` seconds in a ring of fixed
buckets: finished requests, errors, and the sum and count of time to first token and of
inter-token latency. One request adds to one bucket, once, when it finishes (_observe.py):
a few additions, no allocation, nothing per token. Errors are also counted by kind since
the process started (the error code the client was told, else the outcome).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

__all__ = ["Recent"]

# Outcomes that are not errors; "cancelled" (the client left) is counted apart.
_FINE = frozenset({"completed", "incomplete"})


class Recent:
    def __init__(self, step: float = 5.0, steps: int = 120, clock: Any = time.monotonic) -> None:
        """`step` seconds per bucket, `steps` buckets (ten minutes by default)."""
        self.step, self.steps, self.clock = step, steps, clock
        self._stamp = [-1] * steps  # the bucket number each slot holds
        self._requests = [0] * steps
        self._errors = [0] * steps
        self._tokens = [0] * steps
        self._ttft = [0.0] * steps
        self._ttft_n = [0] * steps
        self._itl = [0.0] * steps
        self._itl_n = [0] * steps
        self.errors: Counter[str] = Counter()  # by kind, since the process started
        self.cancelled = 0

    def add(self, outcome: str, error_code: str | None, ttft: float | None, itl: float | None,
            output_tokens: int) -> None:
        """One finished request: its outcome (_observe.py's), the error code it was answered with,
        its time to first token and mean inter-token latency in seconds (None: none)."""
        i = self._slot(int(self.clock() // self.step))
        self._requests[i] += 1
        self._tokens[i] += output_tokens
        if ttft is not None:
            self._ttft[i] += ttft
            self._ttft_n[i] += 1
        if itl is not None:
            self._itl[i] += itl
            self._itl_n[i] += 1
        if outcome == "cancelled":
            self.cancelled += 1
        elif outcome not in _FINE:
            self._errors[i] += 1
            self.errors[error_code or outcome] += 1

    def series(self) -> dict[str, Any]:
        """Per bucket, oldest first, ending with the current one: requests and output tokens per
        second, errors, mean TTFT and ITL in milliseconds (None where no request had one)."""
        now = int(self.clock() // self.step)
        out: dict[str, list] = {"requests_per_s": [], "tokens_per_s": [], "errors": [], "ttft_ms": [], "itl_ms": []}
        for number in range(now - self.steps + 1, now + 1):
            i = number % self.steps
            live = self._stamp[i] == number
            out["requests_per_s"].append(round(self._requests[i] / self.step, 3) if live else 0)
            out["tokens_per_s"].append(round(self._tokens[i] / self.step, 1) if live else 0)
            out["errors"].append(self._errors[i] if live else 0)
            out["ttft_ms"].append(_mean_ms(self._ttft[i], self._ttft_n[i]) if live else None)
            out["itl_ms"].append(_mean_ms(self._itl[i], self._itl_n[i]) if live else None)
        return {"step_s": self.step, **out}

    def _slot(self, number: int) -> int:
        i = number % self.steps
        if self._stamp[i] != number:  # a bucket from an earlier lap of the ring: start it over
            self._stamp[i] = number
            self._requests[i] = self._errors[i] = self._tokens[i] = self._ttft_n[i] = self._itl_n[i] = 0
            self._ttft[i] = self._itl[i] = 0.0
        return i


def _mean_ms(total: float, n: int) -> float | None:
    return round(1000.0 * total / n, 2) if n else None
