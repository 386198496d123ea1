"""Big buffers go back to the OS when freed: glibc's mmap threshold pinned at its default.

glibc serves allocations above `M_MMAP_THRESHOLD` (128 KiB) with their own mmap and unmaps
them on free, but by default it raises that threshold to the size of each mmapped block freed
(up to 32 MiB). After one large request body, later bodies, parsed strings and renders of up
to that size come from the heap, and the heap rarely shrinks: a single 20 MB request left the
gateway ~60 MB bigger for good. Setting the threshold explicitly turns the adjustment off
(mallopt(3)), so memory follows the requests in flight. Not glibc (musl, macOS): nothing to do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["pin_mmap_threshold"]

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3  # <malloc.h>
_THRESHOLD = 128 * 1024  # glibc's own default


def pin_mmap_threshold() -> bool:
    """True when glibc took the setting."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, _THRESHOLD))
    if not ok:
        log.debug("mallopt(M_MMAP_THRESHOLD) was refused")
    return ok
