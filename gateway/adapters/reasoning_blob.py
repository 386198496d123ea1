"""Reasoning that survives a stateless round trip, carried in `encrypted_content`.

Codex sends no `previous_response_id` over HTTP: it echoes each reasoning item back in the
next request, and only `encrypted_content` is sure to come back as it was sent (clients may
drop `content`). The gateway therefore puts the exact reasoning text in that field:

    base64url( version byte || HMAC-SHA256(secret, version || payload) || payload )

with `payload` the UTF-8 JSON `{"text": …}`. The blob is authenticated, not encrypted: the
text is the model's own reasoning, already sent in `content`. The MAC makes sure a restored
history holds only text this gateway (or one sharing its secret) produced.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import secrets

_VERSION = 1
_MAC_BYTES = hashlib.sha256().digest_size

# Replaced by `use_secret` at startup; a random key means blobs are valid for this process only.
_key = secrets.token_bytes(32)


def use_secret(secret: str | None) -> None:
    """Gateways sharing a secret accept each other's blobs; None keeps the random per-process key."""
    global _key
    if secret:
        _key = secret.encode()
        unseal.cache_clear()


def seal(text: str) -> str:
    payload = json.dumps({"text": text}, ensure_ascii=False).encode()
    header = bytes([_VERSION])
    mac = hmac.new(_key, header + payload, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(header + mac + payload).decode("ascii")


@functools.lru_cache(maxsize=4096)
def unseal(blob: str) -> str | None:
    """The reasoning text in a blob this gateway sealed; None for a tampered or foreign blob.
    Cached: Codex sends every earlier turn's blobs again with each request."""
    try:
        raw = base64.urlsafe_b64decode(blob.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    if len(raw) <= 1 + _MAC_BYTES or raw[0] != _VERSION:
        return None
    header, mac, payload = raw[:1], raw[1:1 + _MAC_BYTES], raw[1 + _MAC_BYTES:]
    if not hmac.compare_digest(mac, hmac.new(_key, header + payload, hashlib.sha256).digest()):
        return None
    text = json.loads(payload).get("text")
    return text if isinstance(text, str) else None
