"""Reasoning blobs: exact round trip of the text, the turn's name and ids, anything not sealed
with this secret rejected, version 2 blobs still read and version 1 refused, and a size Codex
can afford to resend."""

import base64
import hashlib
import hmac
import json
import struct
import zlib
from array import array
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.adapters import reasoning_blob

TOKEN_IDS = st.lists(st.integers(0, 2**31 - 1), max_size=300)
TURNS = st.one_of(st.none(), st.text("abcdef0123456789_", min_size=1, max_size=40).map(lambda s: "resp_" + s))


@pytest.fixture(autouse=True)
def secret(monkeypatch):
    monkeypatch.setattr(reasoning_blob, "_key", reasoning_blob._key)  # restored after each test
    reasoning_blob.use_secret("test-secret")


@given(st.text(), TURNS, TOKEN_IDS)
def test_round_trip_is_exact(text, turn, token_ids):
    sealed = reasoning_blob.unseal(reasoning_blob.seal(text, token_ids, turn=turn))
    assert sealed.text == text and sealed.turn == turn
    assert (sealed.token_ids.tolist() if sealed.token_ids is not None else []) == token_ids


def test_text_alone_names_no_turn():
    assert reasoning_blob.unseal(reasoning_blob.seal("thinking")) == reasoning_blob.Sealed("thinking", None)


def _version_2(text: str, token_ids: list[int], key: bytes = b"test-secret") -> str:
    """What gateways that sealed the ids themselves wrote (little-endian int32, zlib flag)."""
    encoded = text.encode()
    body = struct.pack("<I", len(encoded)) + encoded + array("i", token_ids).tobytes()
    payload = b"\x01" + zlib.compress(body)
    mac = hmac.new(key, b"\x02" + payload, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(b"\x02" + mac + payload).decode()


@given(st.text(), TOKEN_IDS)
def test_a_version_2_blob_still_restores_its_ids(text, token_ids):
    sealed = reasoning_blob.unseal(_version_2(text, token_ids))
    assert sealed.text == text and (list(sealed.token_ids) if sealed.token_ids else []) == token_ids


@given(st.text(min_size=1), TURNS, st.data())
def test_any_changed_byte_is_rejected(text, turn, data):
    raw = bytearray(base64.urlsafe_b64decode(reasoning_blob.seal(text, turn=turn)))
    position = data.draw(st.integers(0, len(raw) - 1))
    raw[position] ^= data.draw(st.integers(1, 255))
    assert reasoning_blob.unseal(base64.urlsafe_b64encode(bytes(raw)).decode()) is None


def test_another_secret_is_rejected():
    blob = reasoning_blob.seal("thinking", turn="resp_1")
    reasoning_blob.use_secret("other-secret")
    assert reasoning_blob.unseal(blob) is None
    reasoning_blob.use_secret("test-secret")
    assert reasoning_blob.unseal(blob).text == "thinking"


def test_a_version_1_blob_is_refused():
    """What 0.0 gateways sealed (JSON text, the same MAC): never released, so never read."""
    payload = json.dumps({"text": "older thinking"}).encode()
    mac = hmac.new(b"test-secret", b"\x01" + payload, hashlib.sha256).digest()
    blob = base64.urlsafe_b64encode(b"\x01" + mac + payload).decode()
    assert reasoning_blob.unseal(blob) is None


@pytest.mark.parametrize("blob", ["", "ENCRYPTED_BLOB_217cd1a8fbcd4704be75f782b5479f9c", "é", "AA==", "!!!"])
def test_garbage_is_rejected(blob):
    assert reasoning_blob.unseal(blob) is None


@pytest.mark.parametrize("tokens", [1000, 2000])
def test_a_long_turn_costs_codex_about_five_bytes_per_token(tokenizer, tokens):
    """Codex resends every blob with every request. Measured on real text (this repo's docs and
    source, Qwen3 vocabulary): 4.1–5.2 bytes per generated token for text + ids, about what the
    text alone took as version 1 JSON; zlib roughly halves the ids' 4 bytes each."""
    root = Path(__file__).parents[2]
    text = (root / "docs" / "codex.md").read_text() + (root / "gateway" / "tokenfix" / "_splice.py").read_text()
    token_ids = tokenizer.encode(text, add_special_tokens=False)[:tokens]
    text = tokenizer.decode(token_ids)
    blob = reasoning_blob.seal(text, token_ids)
    version_1 = 4 * (1 + 32 + len(json.dumps({"text": text}, ensure_ascii=False).encode())) / 3
    assert len(blob) < 6 * tokens and len(blob) < 1.1 * version_1
    assert len(blob) < len(reasoning_blob.seal(text)) + 3 * tokens  # the ids: under 3 bytes each, base64 included


def test_the_unseal_cache_is_bounded_in_bytes_and_keeps_no_junk(monkeypatch):
    from gateway.adapters import reasoning_blob

    cache = reasoning_blob._Cache(max_bytes=20_000)
    monkeypatch.setattr(reasoning_blob, "_cache", cache)
    blobs = [reasoning_blob.seal(f"thought {i} " + "x" * 1000, list(range(i, i + 100))) for i in range(100)]
    for i, blob in enumerate(blobs):
        assert reasoning_blob.unseal(blob).token_ids.tolist() == list(range(i, i + 100))
    assert cache.size <= 20_000 and len(cache._entries) < 100
    size = cache.size
    for i in range(200):  # 2 MB junk blobs: refused, and nothing of them is kept
        assert reasoning_blob.unseal("A" * 2_000_000 + str(i)) is None
    assert cache.size == size
    assert reasoning_blob.unseal(blobs[0]).text.startswith("thought 0 ")  # evicted, unsealed again


def test_the_blob_costs_the_text_and_a_name():
    """Codex resends every blob with every request: the ids stay in the session store."""
    text = "thinking " * 200
    assert len(reasoning_blob.seal(text, turn="resp_" + "0" * 32)) < len(reasoning_blob.seal(text)) + 60
