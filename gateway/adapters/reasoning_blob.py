"""Reasoning that survives a stateless round trip, carried in `encrypted_content`.

Codex sends no `previous_response_id` over HTTP: it echoes each reasoning item back in the
next request, and only `encrypted_content` is sure to come back as it was sent (clients may
drop `content`). The gateway therefore puts the exact reasoning text in that field, and with
the first reasoning item of a turn the name of the turn (its response id), under which the
session store keeps the ids the model generated in that whole turn once it ended
(gateway/pipeline/session.py), so that a gateway without the session's cached tokens can
still put them in the next prompt exactly. The blob is sealed when the item closes, before
the rest of the turn is generated: each item is done before the next one starts, as OpenAI
streams them, so the ids themselves cannot be in it.

    base64url( version || HMAC-SHA256(secret, version || payload) || payload )

Version 3: `payload` is a flags byte, then the body, zlib-compressed when that is smaller
(flag 1): the text's UTF-8 length (uint32), the text, the turn's response id (its length as
uint16, then ASCII; may be empty), then the turn's ids (int32 each, may be none); all
little-endian. A streamed Responses turn names itself (its ids are kept in the session store
under that name: each reasoning item is closed before the turn ends); a blob sealed when the
whole turn is known (a non-streamed Anthropic thinking block) carries the ids themselves.
Version 2 (still read): text then ids, no name. Version 1 (JSON text only, from before the
first release) is refused. The blob is authenticated, not encrypted: the text is the model's
own reasoning, already sent in `content`. The MAC makes sure a restored history holds only
text, turns and tokens this gateway (or one sharing its secret) produced.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import struct
import sys
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import xxhash

__all__ = ["seal", "unseal", "use_secret"]

_VERSION = 3
_MAC_BYTES = hashlib.sha256().digest_size
_ZLIB = 1

# Replaced by `use_secret` at startup; a random key means blobs are valid for this process only.
_key = secrets.token_bytes(32)


@dataclass(frozen=True, slots=True)
class Sealed:
    text: str
    token_ids: array | None  # int32 ids of the whole turn, when sealed (shared, do not mutate)
    turn: str | None = None  # the response id the turn's ids are kept under (streamed turns)


def use_secret(secret: str | None) -> None:
    """Gateways sharing a secret accept each other's blobs; None keeps the random per-process key."""
    global _key
    if secret:
        _key = secret.encode()
        _cache.clear()


def seal(text: str, token_ids: Sequence[int] | None = None, *, turn: str | None = None) -> str:
    """`token_ids`: the whole turn's, when known; else `turn`, the response id under which the
    turn's generated ids will be kept (the turn's first reasoning item)."""
    encoded = text.encode("utf-8", "surrogatepass")
    name = (turn or "").encode("ascii")
    ids = array("i", token_ids or ())
    if sys.byteorder == "big":
        ids.byteswap()
    body = struct.pack("<I", len(encoded)) + encoded + struct.pack("<H", len(name)) + name + ids.tobytes()
    packed = zlib.compress(body)
    payload = bytes([_ZLIB]) + packed if len(packed) < len(body) else b"\0" + body
    header = bytes([_VERSION])
    mac = hmac.new(_key, header + payload, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(header + mac + payload).decode("ascii")


class _Cache:
    """Unsealed blobs by a 128-bit digest of the blob (not the blob: a key must not keep a
    client's megabytes alive), least recently used first out beyond `max_bytes` of contents.
    Only blobs that passed the MAC are kept, so junk never takes room."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._entries: OrderedDict[bytes, tuple[Sealed, int]] = OrderedDict()
        self._seed = int.from_bytes(os.urandom(8), "little")

    def key(self, blob: str) -> bytes:
        return xxhash.xxh3_128_digest(blob.encode("utf-8", "surrogatepass"), seed=self._seed)

    def get(self, key: bytes) -> Sealed | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: bytes, sealed: Sealed) -> None:
        size = len(sealed.text) + (len(sealed.token_ids) * 4 if sealed.token_ids is not None else 0) + 100
        if size > self.max_bytes:
            return
        self._entries[key] = (sealed, size)
        self.size += size
        while self.size > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.size -= evicted

    def clear(self) -> None:
        self._entries.clear()
        self.size = 0


_cache = _Cache(max_bytes=64 * 1024 * 1024)


def unseal(blob: str) -> Sealed | None:
    """What a blob this gateway sealed holds; None for a tampered or foreign blob.
    Cached: Codex sends every earlier turn's blobs again with each request."""
    key = _cache.key(blob)
    sealed = _cache.get(key)
    if sealed is None:
        sealed = _unseal(blob)
        if sealed is not None:
            _cache.put(key, sealed)
    return sealed


def _unseal(blob: str) -> Sealed | None:
    try:
        raw = base64.urlsafe_b64decode(blob.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    if len(raw) <= 1 + _MAC_BYTES or raw[0] not in (2, _VERSION):
        return None
    header, mac, payload = raw[:1], raw[1:1 + _MAC_BYTES], raw[1 + _MAC_BYTES:]
    if not hmac.compare_digest(mac, hmac.new(_key, header + payload, hashlib.sha256).digest()):
        return None
    body = zlib.decompress(payload[1:]) if payload[0] & _ZLIB else payload[1:]
    (size,) = struct.unpack_from("<I", body)
    text = body[4:4 + size].decode("utf-8", "surrogatepass")
    rest, turn = 4 + size, None
    if raw[0] == _VERSION:
        (length,) = struct.unpack_from("<H", body, rest)
        turn = body[rest + 2:rest + 2 + length].decode("ascii") or None
        rest += 2 + length
    ids = array("i", body[rest:])
    if sys.byteorder == "big":
        ids.byteswap()
    return Sealed(text, ids or None, turn)
