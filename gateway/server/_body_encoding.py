"""Compressed request bodies (`Content-Encoding: zstd | gzip | deflate`), decoded as they arrive.

Codex compresses its Responses bodies with zstd: the whole JSON body through
`zstd::stream::encode_all(…, 3)` with `Content-Encoding: zstd` and `Content-Type:
application/json` (openai/codex, codex-rs/codex-client/src/request.rs, `prepare_encoded_json`);
other clients send gzip or deflate. Undecoded, such a body is not JSON (a 400).

A body is decoded chunk by chunk while it is read, and never past `--max-request-bytes`: each
decoder stops producing output as soon as the decoded body is one byte over the limit, and the
request is a 413 then — so a few kilobytes that would inflate to gigabytes (a compression bomb)
cost at most the limit in memory. The compressed bytes count against the limit too. An encoding
the gateway does not decode (`br`: no maintained Brotli decoder is among its dependencies; a list
of several codings) is a 415.
"""

from __future__ import annotations

import zlib
from typing import Protocol

import zstandard

from gateway.core.errors import APIError, invalid_request

__all__ = ["BodyDecoder", "body_decoder", "too_large"]

_WRITE = 64 * 1024  # zstd's output is handed over (and counted) in pieces of this size at most


class BodyDecoder(Protocol):
    def feed(self, chunk: bytes) -> None:
        """Decode the next compressed bytes; APIError 413 once the output passes the limit."""

    def finish(self) -> bytes:
        """The decoded body (APIError 400 if the compressed data is cut short or malformed)."""


def too_large(max_bytes: int) -> APIError:
    return APIError(f"Request body exceeds the limit of {max_bytes} bytes.", status=413, code="request_too_large")


def body_decoder(content_encoding: str | None, max_bytes: int) -> BodyDecoder | None:
    """The decoder for a request's `Content-Encoding` (None: not encoded), or APIError 415."""
    coding = (content_encoding or "").strip().lower()
    if coding in ("", "identity"):
        return None
    if coding == "zstd":
        return _Zstd(max_bytes)
    if coding in ("gzip", "x-gzip"):
        return _Zlib(max_bytes, 16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return _Zlib(max_bytes, None)
    raise APIError(f"Unsupported Content-Encoding {content_encoding!r}: this gateway decodes request bodies "
                   f"sent as zstd, gzip or deflate (one coding).", status=415, type="invalid_request_error",
                   code="unsupported_content_encoding")


class _Output:
    """The decoded body so far, refused one byte past the limit."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.data = bytearray()

    def write(self, chunk: bytes) -> int:
        self.data += chunk
        if len(self.data) > self.max_bytes:
            raise too_large(self.max_bytes)
        return len(chunk)


class _Zstd:
    def __init__(self, max_bytes: int) -> None:
        self._output = _Output(max_bytes)
        self._writer = zstandard.ZstdDecompressor().stream_writer(self._output, write_size=_WRITE,
                                                                   write_return_read=True, closefd=False)

    def feed(self, chunk: bytes) -> None:
        try:
            self._writer.write(chunk)
        except zstandard.ZstdError as exc:
            raise _malformed("zstd", exc) from None

    def finish(self) -> bytes:
        self._writer.flush()
        return bytes(self._output.data)


class _Zlib:
    """gzip (`wbits` 31), or deflate: the zlib format HTTP names so, or the raw deflate some
    clients send under that name (`wbits` None: told apart by the zlib header)."""

    def __init__(self, max_bytes: int, wbits: int | None) -> None:
        self._output = _Output(max_bytes)
        self._wbits = wbits
        self._head = b""  # deflate: the first bytes, until there are two to tell the format by
        self._decoder: zlib._Decompress | None = None if wbits is None else zlib.decompressobj(wbits)

    def feed(self, chunk: bytes) -> None:
        if self._decoder is None:
            self._head += chunk
            if len(self._head) < 2:
                return
            chunk, self._head = self._head, b""
            zlib_header = chunk[0] & 0x0F == 8 and (chunk[0] << 8 | chunk[1]) % 31 == 0
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
        decoder, output = self._decoder, self._output
        try:
            while chunk:
                output.write(decoder.decompress(chunk, output.max_bytes + 1 - len(output.data)))
                chunk = decoder.unconsumed_tail
        except zlib.error as exc:
            raise _malformed(self._name, exc) from None

    def finish(self) -> bytes:
        if self._head:
            self.feed(b"")
        decoder = self._decoder
        if decoder is None or not decoder.eof:
            raise invalid_request(f"The {self._name} request body is cut short.")
        return bytes(self._output.data)

    @property
    def _name(self) -> str:
        return "gzip" if self._wbits is not None else "deflate"


def _malformed(coding: str, exc: Exception) -> APIError:
    return invalid_request(f"The request body is not valid {coding} data ({exc}).")
