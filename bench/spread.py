"""A figure measured several times on a noisy machine: its median and range, as data (results
JSON) and as a table cell ("median (min–max)"), the same way in every benchmark."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

__all__ = ["cell", "spread"]


def spread(values: Sequence[float], digits: int | None = None) -> dict[str, float]:
    """min, median, max and n of `values` (rounded to `digits` when given)."""
    def shown(value: float) -> float:
        return value if digits is None else round(value, digits)

    return {"min": shown(min(values)), "median": shown(statistics.median(values)), "max": shown(max(values)),
            "n": len(values)}


def cell(values: Sequence[float], shown: Callable[[float], str] = "{:g}".format,
         bound: Callable[[float], str] | None = None) -> str:
    """"median (min–max)" of `values`, or the one value; `shown` formats the median, `bound` the range."""
    middle = statistics.median(values)
    if len(values) == 1:
        return shown(middle)
    bound = bound or shown
    return f"{shown(middle)} ({bound(min(values))}–{bound(max(values))})"
