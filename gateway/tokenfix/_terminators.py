"""Where a render's turns end: turn terminators counted and found.

A turn ends with its family's terminator (`<|im_end|>`; harmony `<|end|>`, `<|return|>`,
`<|call|>`), and formats never let message text produce special tokens, so every terminator in
a render is the template's own: counting them says how many turns a run of ids holds. The
token state (gateway/tokenfix/state.py) counts its turns so, and the splice
(gateway/tokenfix/_splice.py) finds where a turn ends.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Sequence

import numpy as np

__all__ = ["count_terminators", "nth_terminator"]


def count_terminators(ids: Sequence[int], terminators: Collection[int]) -> int:
    if isinstance(ids, array):  # a TokenState's ids: counted without boxing each one
        return int(np.isin(np.frombuffer(ids, dtype=np.int32), list(terminators)).sum()) if ids else 0
    if isinstance(ids, list):
        return sum(map(ids.count, terminators))
    return sum(1 for t in ids if t in terminators)


def nth_terminator(ids: Sequence[int], terminators: frozenset[int], n: int) -> int | None:
    """Index of the n-th (1-based) terminator in `ids`, or None when there are fewer."""
    if n <= 0:
        return -1
    seen = 0
    for index, token in enumerate(ids):
        if token in terminators:
            seen += 1
            if seen == n:
                return index
    return None
