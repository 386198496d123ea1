"""`UpstreamStream.relay` (push): each read's chunks go to the sink from the read itself; the same
tokens as iterating, for any chunk boundaries; a hold pauses reading until it resolves; the
sink's and the replica's errors, a stop, an interrupt and a replica closing mid-stream end the
relay as they end iteration."""

from __future__ import annotations

import asyncio
import gc
import warnings

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.errors import APIError, UpstreamFailed
from gateway.upstream.chunks import TokenChunk, Usage
from gateway.upstream.replica import Replica
from gateway.upstream.stream import MAX_UNTAKEN
from tests.support.raw_replica import CLOSE, LAST_CHUNK, Pause, RawReplica, chunk, ok_head, sse
from tests.support.waiting import async_wait_for
from tests.upstream.test_stream_client import EXPECTED, RESPONSE, split, stream_on_socketpair

on_fixture_loop = pytest.mark.asyncio(loop_scope="session")


def token_event(token: int) -> bytes:
    return chunk(sse({"choices": [{"index": 0, "token_ids": [token], "text": "x"}]}))


def many_tokens(n: int) -> list[bytes]:
    """A response of `n` one-token events, written at once."""
    return [ok_head(), b"".join(token_event(i) for i in range(n)), chunk(sse(b"[DONE]")), LAST_CHUNK]


def tokens_of(items: list) -> list[int]:
    return [t for item in items if isinstance(item, TokenChunk) for t in item.token_ids]


async def relayed_reads(pieces: list[bytes]) -> tuple[list[list], int]:
    """Feed `pieces` to a real connection's protocol as reads while the stream relays: what the
    sink got per call, and how many connections are idle after."""
    async with stream_on_socketpair() as (stream, connection, owner):
        calls: list[list] = []
        relaying = asyncio.ensure_future(stream.relay(lambda items: calls.append(items)))
        await asyncio.sleep(0)  # the relay waits for reads
        for piece in pieces:
            connection.data_received(piece)
        await relaying
        return calls, owner.n_idle


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0), max_size=40))
def test_any_chunk_boundaries_relay_the_same_tokens_as_iterating(cuts):
    calls, n_idle = asyncio.run(relayed_reads(split(RESPONSE, cuts)))
    items = [item for call in calls for item in call]
    assert tokens_of(items) == EXPECTED[0].token_ids
    assert [item for item in items if isinstance(item, TokenChunk)][-1].finish_reason == "stop"
    assert items[-1] == Usage(2, 4)
    assert n_idle == 1


def test_each_read_goes_to_the_sink_from_the_read_itself():
    """One read, one sink call, made inside `data_received`: no task runs in between."""
    async def scenario() -> list[list[int]]:
        async with stream_on_socketpair() as (stream, connection, _):
            got: list[int] = []
            relaying = asyncio.ensure_future(stream.relay(lambda items: got.extend(tokens_of(items))))
            await asyncio.sleep(0)
            connection.data_received(ok_head())
            seen = []
            for token in (7, 8, 9):
                connection.data_received(token_event(token))
                seen.append(list(got))  # synchronously, before the loop ran anything
            connection.data_received(chunk(sse(b"[DONE]")) + LAST_CHUNK)
            await relaying
            return seen
    assert asyncio.run(scenario()) == [[7], [7, 8], [7, 8, 9]]


def _choice(token: int, **fields: object) -> dict:
    return {"index": 0, "token_ids": [token], "text": "x", "logprobs": None, **fields}


# Reads of one event each, as engine pace brings them: the plain one-token event takes a short
# path (no split, no merge); every other shape must still come out as the general path gives it.
ONE_EVENT_READS = [
    sse({"choices": [_choice(7)]}),
    b": keep-alive comment\n\n",
    b'data:{"choices":[{"index":0,"token_ids":[8],"logprobs":null}]}\n\n',  # no space after the colon
    b'data: {"choices":[{"index":0,"token_ids":[9],"logprobs":null}]}\r\n\r\n',  # CRLF lines
    sse({"choices": [_choice(10, logprobs={"token_logprobs": [-0.5], "top_logprobs": None})]}),
    sse({"choices": [_choice(11), _choice(12)]}),  # two choices in one event
    sse({"choices": [{"index": 0, "logprobs": None}]}),  # no token ids
    sse({"choices": [_choice(13, finish_reason="stop", stop_reason=151645)]}),
    sse({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 7}}),
]


def test_one_event_reads_decode_as_the_general_path_does():
    async def relayed(pieces: list[bytes]) -> tuple[list[list], list]:
        async with stream_on_socketpair() as (stream, connection, _):
            calls: list[list] = []
            relaying = asyncio.ensure_future(stream.relay(lambda items: calls.append(items)))
            await asyncio.sleep(0)
            for piece in pieces:
                connection.data_received(piece)
            await relaying
            return calls, [item for call in calls for item in call]

    body = [chunk(read) for read in ONE_EVENT_READS] + [chunk(sse(b"[DONE]")) + LAST_CHUNK]
    alone, items = asyncio.run(relayed([ok_head(), *body]))
    _, together = asyncio.run(relayed([ok_head() + b"".join(body)]))  # one read: split and merged
    assert len(alone) == 8  # a call per event with data (not the comment, not [DONE])

    def flat(items: list) -> tuple:
        chunks = [item for item in items if isinstance(item, TokenChunk)]
        logprobs = [lp for c in chunks for lp in c.logprobs or ()]
        finish = [(c.finish_reason, c.stop_reason) for c in chunks if c.finish_reason]
        return tokens_of(items), logprobs, finish, [item for item in items if isinstance(item, Usage)]

    assert flat(items) == flat(together) == (
        [7, 8, 9, 10, 11, 12, 13], [-0.5], [("stop", 151645)], [Usage(2, 7)])


@on_fixture_loop
async def test_a_hold_pauses_reading_until_it_resolves_and_loses_nothing():
    n_tokens = 20_000  # ~1.4 MB: the kernel's buffers fill while the relay holds
    async with RawReplica() as raw, httpx.AsyncClient() as client:
        raw.queue(many_tokens(n_tokens))
        stream = await Replica(raw.url, client, api="completions").open([1], {}, "r")
        connection = stream.connection
        client_ready = asyncio.Event()
        got: list[int] = []
        holds = 0

        def sink(items: list) -> asyncio.Future | None:
            nonlocal holds
            got.extend(tokens_of(items))
            if holds == 0:  # the first batch: the client is slow
                holds += 1
                return asyncio.ensure_future(client_ready.wait())
            return None

        relaying = asyncio.ensure_future(stream.relay(sink))
        await async_wait_for(lambda: holds and connection.paused, "reading paused for the hold")
        held = len(got)
        await asyncio.sleep(0.2)
        assert len(got) == held < n_tokens  # nothing handed on while held
        client_ready.set()
        await relaying
        await stream.aclose()
    assert got == list(range(n_tokens)) and not connection.paused and not raw.aborts


@on_fixture_loop
async def test_a_relay_that_starts_after_reading_paused_resumes_it():
    """The first reads may come before the relay begins (and pause at MAX_UNTAKEN): the relay
    takes them and reads on."""
    n_tokens = 3 * MAX_UNTAKEN
    async with RawReplica() as raw, httpx.AsyncClient() as client:
        raw.queue(many_tokens(n_tokens))
        stream = await Replica(raw.url, client, api="completions").open([1], {}, "r")
        connection = stream.connection
        await async_wait_for(lambda: connection.paused, "reading paused before the relay")
        got: list[int] = []
        await asyncio.wait_for(stream.relay(lambda items: got.extend(tokens_of(items))), 10)
        await stream.aclose()
    assert got == list(range(n_tokens)) and not connection.paused


@on_fixture_loop
async def test_what_the_sink_raises_ends_the_relay_in_the_task():
    async with RawReplica() as raw, httpx.AsyncClient() as client:
        raw.queue([ok_head(), token_event(1), Pause(0.05), token_event(2), Pause(5), LAST_CHUNK])
        replica = Replica(raw.url, client, api="completions")
        stream = await replica.open([1], {}, "r")
        connection = stream.connection
        got = []

        def sink(items: list) -> None:
            got.extend(tokens_of(items))
            if 2 in got:
                raise RuntimeError("the writer broke")

        with pytest.raises(RuntimeError, match="the writer broke"):
            await stream.relay(sink)
        await stream.aclose()
        assert got == [1, 2]
        assert connection.closed  # vLLM aborts a generation whose connection closes


@on_fixture_loop
@pytest.mark.parametrize(("ending", "why"), [
    ([chunk(sse({"error": {"message": "engine dead"}})), LAST_CHUNK], "engine dead"),  # an in-stream error
    ([token_event(2)[:7], CLOSE], "stream broke"),  # the replica closes mid-chunk
])
async def test_a_broken_stream_fails_the_relay_after_the_tokens_before_it(ending, why):
    async with RawReplica() as raw, httpx.AsyncClient() as client:
        raw.queue([ok_head(), token_event(1), *ending])
        replica = Replica(raw.url, client, api="completions")
        stream = await replica.open([1], {}, "r")
        got: list[int] = []
        with pytest.raises(UpstreamFailed, match=why):
            await stream.relay(lambda items: got.extend(tokens_of(items)))
        await stream.aclose()
    assert got == [1]


@on_fixture_loop
async def test_a_stop_ends_the_relay_quietly_and_aborts_the_rest():
    async with RawReplica() as raw, httpx.AsyncClient() as client:
        raw.queue([ok_head(), token_event(0), Pause(0.05), token_event(1), Pause(0.05), token_event(2), Pause(5),
                   LAST_CHUNK])
        replica = Replica(raw.url, client, api="completions")
        stream = await replica.open([1], {}, "r")
        connection = stream.connection
        calls: list[list[int]] = []

        def sink(items: list) -> None:
            calls.append(tokens_of(items))
            if 1 in calls[-1]:
                stream.stop_relay()

        await stream.relay(sink)
        await asyncio.sleep(0.2)  # token 2 was sent meanwhile: nobody takes it
        await stream.aclose()
        assert calls == [[0], [1]]
        assert connection.closed  # the rest of the generation is aborted


@on_fixture_loop
async def test_an_interrupt_while_relaying_is_shutting_down():
    async with RawReplica() as raw, httpx.AsyncClient() as client:
        raw.queue([ok_head(), token_event(1), Pause(5), LAST_CHUNK])
        replica = Replica(raw.url, client, api="completions")
        stream = await replica.open([1], {}, "r")
        got: list[int] = []
        relaying = asyncio.ensure_future(stream.relay(lambda items: got.extend(tokens_of(items))))
        await async_wait_for(lambda: got == [1], "the first token relayed")
        assert replica.interrupt() == 1
        with pytest.raises(APIError) as failed:
            await relaying
        await stream.aclose()
    assert failed.value.code == "server_shutting_down"


def test_a_relay_cancelled_before_it_awaits_a_hold_closes_it():
    """The client leaves between a read that asked to wait and the relay's next step: the hold
    (a coroutine) is closed, not left never awaited."""
    async def scenario() -> bool:
        async with stream_on_socketpair() as (stream, connection, _):
            drained = asyncio.Event()

            async def drain() -> None:
                drained.set()

            hold = drain()
            relaying = asyncio.ensure_future(stream.relay(lambda items: hold))
            await asyncio.sleep(0)
            connection.data_received(ok_head() + token_event(1))  # the sink answers with the hold
            relaying.cancel()  # before the relay ran again
            with pytest.raises(asyncio.CancelledError):
                await relaying
            return drained.is_set() or hold.cr_frame is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert asyncio.run(scenario()) is False  # never run, and closed (a closed coroutine has no frame)
        gc.collect()
