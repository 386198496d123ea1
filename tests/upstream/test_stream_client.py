"""The token stream's client (gateway/upstream/connection.py, stream.py): chunk boundaries
anywhere, keep-alive reuse, a replica closing mid-chunk, a slow reader."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.upstream.chunks import TokenChunk, Usage
from gateway.upstream.connection import Connection, Connections
from gateway.upstream.replica import Replica
from gateway.upstream.stream import MAX_UNTAKEN, UpstreamStream
from tests.support.raw_replica import LAST_CHUNK, RawReplica, chunk, ok_head, sse
from tests.support.waiting import async_wait_for
from tests.upstream.taken import taken

on_fixture_loop = pytest.mark.asyncio(loop_scope="session")  # the loop the async fixtures run in

# vLLM 0.32's /v1/completions stream as recorded (tests/support/vllm_shapes.md), with multibyte
# text: "é" is 2 bytes, the fox 4, so a random boundary often falls inside a character.
EVENTS = [
    {"id": "cmpl-bf37", "object": "text_completion", "created": 1795281135, "model": "tiny-qwen3",
     "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None,
                  "prompt_token_ids": None, "token_ids": [token]}]}
    for token, text, finish in [(88875, " RECEIVE", None), (2, " café", None), (3, " 🦊🦊", None),
                                (151645, "", "stop")]
] + [{"id": "cmpl-bf37", "object": "text_completion", "created": 1795281135, "model": "tiny-qwen3",
      "choices": [], "usage": {"prompt_tokens": 2, "total_tokens": 6, "completion_tokens": 4}}]
PAYLOADS = [orjson.dumps(event) for event in EVENTS]
# One HTTP chunk per event, as vLLM (uvicorn) writes them, then [DONE] and the last chunk.
RESPONSE = ok_head() + b"".join(chunk(sse(p)) for p in [*PAYLOADS, b"[DONE]"]) + LAST_CHUNK
EXPECTED = [TokenChunk([88875, 2, 3, 151645], finish_reason="stop"), Usage(2, 4)]


@contextlib.asynccontextmanager
async def stream_on_socketpair() -> AsyncIterator[tuple[UpstreamStream, Connection, Connections]]:
    """A stream whose request went out on a real connection's protocol over a socketpair: a test
    feeds the response's reads to `connection.data_received` itself."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    owner = Connections("http://replica:8000", idle_timeout=None)
    replica = Replica("http://replica:8000", httpx.AsyncClient(), api="completions")
    try:
        _, connection = await loop.create_connection(lambda: Connection(owner), sock=ours)
        stream = UpstreamStream(replica, "r")
        stream.connection = connection
        connection.send(owner.request_bytes("/v1/completions", b"{}"), stream, None)
        yield stream, connection, owner
    finally:
        theirs.close()


async def relay(pieces: list[bytes]) -> tuple[list[bytes], list, int]:
    """Feed `pieces` to a real connection's protocol as reads; the payloads it split, the chunks
    the turn gets, and how many connections are idle in the pool after."""
    async with stream_on_socketpair() as (stream, connection, owner):
        payloads = []
        for piece in pieces:
            before = stream.n_untaken
            connection.data_received(piece)
            payloads += stream._payloads[before:]  # split, not yet taken
        items = await taken(stream)
        return payloads, items, owner.n_idle


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0), max_size=40))
def test_any_chunk_boundaries_give_the_same_payloads_and_tokens(cuts):
    payloads, items, n_idle = asyncio.run(relay(split(RESPONSE, cuts)))
    assert payloads == PAYLOADS
    assert [orjson.loads(p)["choices"][0]["text"] for p in payloads[:4]] == [" RECEIVE", " café", " 🦊🦊", ""]
    assert items == EXPECTED
    assert n_idle == 1  # the response's end was read: the connection went back to the pool


def test_one_byte_reads_including_inside_a_character_and_inside_done():
    assert RESPONSE.count("🦊".encode()) == 2 and RESPONSE.count(b"data: [DONE]") == 1
    payloads, items, n_idle = asyncio.run(relay([RESPONSE[i:i + 1] for i in range(len(RESPONSE))]))
    assert payloads == PAYLOADS and items == EXPECTED and n_idle == 1


@on_fixture_loop
async def test_one_byte_writes_over_a_real_socket():
    async with RawReplica() as raw, httpx.AsyncClient() as client:
        raw.queue([RESPONSE[i:i + 1] for i in range(len(RESPONSE))])
        replica = Replica(raw.url, client, api="completions")
        stream = await replica.open([1], {}, "r")
        items = await taken(stream)
        await stream.aclose()
    assert [t for c in items if isinstance(c, TokenChunk) for t in c.token_ids] == [88875, 2, 3, 151645]
    assert items[-1] == Usage(2, 4) and not raw.aborts


@on_fixture_loop
async def test_a_second_request_reuses_the_kept_alive_connection():
    async with RawReplica() as raw, httpx.AsyncClient() as client:
        raw.queue([RESPONSE], [RESPONSE])
        replica = Replica(raw.url, client, api="completions")
        for request_id in ("r1", "r2"):
            stream = await replica.open([1], {}, request_id)
            assert await taken(stream) == EXPECTED
            await stream.aclose()
        assert [body["request_id"] for _, body in raw.requests] == ["r1", "r2"]
        assert raw.connections == 1 and replica.connections.opened == 1
        assert replica.connections.n_idle == 1


@on_fixture_loop
async def test_a_slow_reader_stops_the_reading_and_gets_every_token_after():
    n_tokens = 30_000  # ~2 MB of events: more than the kernel buffers, and far more than MAX_UNTAKEN
    events = b"".join(chunk(sse({"choices": [{"index": 0, "token_ids": [i], "text": "x" * 20}]}))
                      for i in range(n_tokens))
    async with RawReplica() as raw, httpx.AsyncClient() as client:
        raw.queue([ok_head(), events, chunk(sse(b"[DONE]")), LAST_CHUNK])
        replica = Replica(raw.url, client, api="completions")
        stream = await replica.open([1], {}, "r")
        connection = stream.connection
        await async_wait_for(lambda: connection.paused, "the connection stopped reading")
        await asyncio.sleep(0.2)  # nothing more is read while paused
        held = stream.n_untaken
        assert MAX_UNTAKEN <= held < 2 * MAX_UNTAKEN
        ids = []
        for item in await taken(stream):
            ids += item.token_ids
        await stream.aclose()
        assert ids == list(range(n_tokens)) and not connection.paused
        assert replica.connections.n_idle == 1 and not raw.aborts
