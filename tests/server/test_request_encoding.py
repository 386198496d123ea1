"""Compressed request bodies: Codex's zstd (as openai/codex's codex-rs/codex-client/src/request.rs
sends it: the whole JSON through `zstd::stream::encode_all(…, 3)`, `Content-Encoding: zstd`), gzip
and deflate prompt the model exactly as the plain body does; a body that inflates past
`--max-request-bytes` is a 413 in the API's shape, found while it is decoded (memory stays near
the limit); an encoding the gateway does not decode is a 415.
"""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import zstandard

from gateway.core.errors import APIError
from gateway.server._body_encoding import body_decoder
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids

LIMIT = 1 << 20
pytestmark = pytest.mark.stack(served_model_name="test-model", max_body_bytes=LIMIT)
CODEX = Path(__file__).parent.parent / "data" / "codex"


def codex_capture(name: str) -> tuple[dict, dict[str, str]]:
    """A body the real Codex CLI sent (0.169.0), and its own headers as it sent them."""
    capture = json.loads((CODEX / name).read_text())
    headers = {k: v for k, v in capture["headers"].items() if k.lower() not in ("host", "content-length")}
    return capture["body"], headers


def zstd_like_codex(raw: bytes) -> bytes:
    """`encode_all` is zstd's streaming encoder at level 3: one frame, no content size in its header."""
    encoder = zstandard.ZstdCompressor(level=3).compressobj()
    return encoder.compress(raw) + encoder.flush()


ENCODERS = {
    "zstd": zstd_like_codex,
    "gzip": gzip.compress,
    "deflate": zlib.compress,  # the zlib format, as HTTP's deflate is
    "raw-deflate": lambda raw: zlib.compress(raw)[2:-4],  # what some clients send under that name
}


def post(stack, path: str, content: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(stack.url + path, content=content, headers=headers, timeout=60)


@pytest.mark.parametrize("coding", sorted(ENCODERS))
def test_a_compressed_codex_body_prompts_the_model_exactly_as_the_plain_one(stack, tokenizer, coding):
    body, headers = codex_capture("http_1_simple_text_request.json")
    body = {**body, "prompt_cache_key": f"encoding-{coding}"}  # its own session: both prompts start fresh
    raw = orjson.dumps(body)
    stack.fake.queue(Script(ids(tokenizer, "Hi") + [IM_END]), Script(ids(tokenizer, "Hi") + [IM_END]))
    plain = post(stack, "/v1/responses", raw, headers)
    assert plain.status_code == 200, plain.text
    plain_prompt = stack.fake.requests[-1].body["token_ids"]
    stack.fake.reset()
    stack.fake.queue(Script(ids(tokenizer, "Hi") + [IM_END]))
    body["prompt_cache_key"] += "-again"
    sent = ENCODERS[coding](orjson.dumps(body))
    encoded = post(stack, "/v1/responses", sent, {**headers, "Content-Encoding": coding.removeprefix("raw-")})
    assert encoded.status_code == 200, encoded.text
    assert stack.fake.requests[-1].body["token_ids"] == plain_prompt
    assert [line for line in encoded.text.splitlines() if line.startswith("event:")][-1] == \
        "event: response.completed"


def bomb(decoded_bytes: int) -> bytes:
    """A small zstd body that decodes to `decoded_bytes` of JSON string."""
    encoder = zstandard.ZstdCompressor(level=19).compressobj()
    chunk = b"x" * (1 << 20)
    parts = [encoder.compress(b'{"model": "test-model", "input": "')]
    parts += [encoder.compress(chunk) for _ in range(decoded_bytes // len(chunk))]
    return b"".join(parts) + encoder.compress(b'"}') + encoder.flush()


@pytest.mark.parametrize(("path", "shape"), [("/v1/responses", "openai"), ("/v1/messages", "anthropic"),
                                             ("/v1/chat/completions", "openai")])
def test_a_body_that_inflates_past_the_limit_is_a_413_in_the_apis_shape(stack, path, shape):
    stack.fake.reset()
    compressed = bomb(64 << 20)
    assert len(compressed) < LIMIT // 100
    response = post(stack, path, compressed, {"Content-Encoding": "zstd", "Content-Type": "application/json"})
    assert response.status_code == 413
    error = response.json()
    if shape == "anthropic":
        assert error == {"type": "error", "error": {"type": "request_too_large",
                                                    "message": f"Request body exceeds the limit of {LIMIT} bytes."}}
    else:
        assert error["error"]["code"] == "request_too_large"
        assert error["error"]["message"] == f"Request body exceeds the limit of {LIMIT} bytes."
    assert stack.fake.requests == []  # nothing reached a replica


@pytest.mark.parametrize("coding", ["zstd", "gzip", "deflate"])
def test_decoding_a_bomb_holds_no_more_than_the_limit(coding):
    """256 MiB of zeros, compressed as it is sent (a few hundred kilobytes): refused one byte past
    the limit, having held about the limit (not the 256 MiB) in memory."""
    def sent() -> Iterator[bytes]:
        zeros = b"\0" * (1 << 20)
        if coding == "zstd":
            encoder = zstandard.ZstdCompressor(level=19).compressobj()
        else:
            encoder = zlib.compressobj(9, wbits=31 if coding == "gzip" else 15)
        for _ in range(256):
            yield encoder.compress(zeros)
        yield encoder.flush()

    decoder = body_decoder(coding, LIMIT)
    assert decoder is not None
    tracemalloc.start()
    try:
        with pytest.raises(APIError) as refused:
            for part in sent():
                decoder.feed(part)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.value.status == 413
    assert peak < 4 * LIMIT


def test_an_unknown_encoding_is_a_415_and_a_corrupt_body_a_400(stack):
    raw = orjson.dumps({"model": "test-model", "input": "hi"})
    brotli = post(stack, "/v1/responses", raw, {"Content-Encoding": "br", "Content-Type": "application/json"})
    assert brotli.status_code == 415
    assert brotli.json()["error"]["code"] == "unsupported_content_encoding"
    assert "zstd, gzip or deflate" in brotli.json()["error"]["message"]
    corrupt = post(stack, "/v1/responses", b"\x28\xb5\x2f\xfd not zstd", {"Content-Encoding": "zstd"})
    assert corrupt.status_code == 400 and "zstd" in corrupt.json()["error"]["message"]
    cut = post(stack, "/v1/responses", gzip.compress(raw)[:-8], {"Content-Encoding": "gzip"})
    assert cut.status_code == 400 and cut.json()["error"]["message"] == "The gzip request body is cut short."
