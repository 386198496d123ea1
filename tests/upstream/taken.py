"""What a stream hands on, taken whole: the chunks `UpstreamStream.relay` delivers, in order."""

from __future__ import annotations

from gateway.upstream.chunks import TokenChunk, Usage
from gateway.upstream.stream import UpstreamStream


async def taken(stream: UpstreamStream, into: list[TokenChunk | Usage] | None = None) -> list[TokenChunk | Usage]:
    """Relay `stream` to its end into `into` (kept as far as it got when the stream raises)."""
    chunks = [] if into is None else into
    await stream.relay(chunks.extend)
    return chunks
