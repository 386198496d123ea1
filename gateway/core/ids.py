"""Identifiers: UUID v7 (time-ordered, RFC 9562) with OpenAI-style prefixes."""

from __future__ import annotations

import os
import time
import uuid

__all__ = ["new_id"]


def uuid7() -> uuid.UUID:
    """RFC 9562 UUID v7: 48-bit unix-ms timestamp, version 7, variant 10, random rest."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | (rand >> 66 & 0xFFF) << 64 | 0b10 << 62 | (rand & (1 << 62) - 1)
    return uuid.UUID(int=value)


def new_id(prefix: str) -> str:
    """`resp_…`, `msg_…`, `fc_…`, `call_…`, `rs_…`: prefix + 32 hex digits of a UUID v7."""
    return f"{prefix}_{uuid7().hex}"
