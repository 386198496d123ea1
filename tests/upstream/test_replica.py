"""Upstream faults from a replica that answers with scripted raw bytes (tests/support/raw_replica.py);
the happy paths run against real vLLM elsewhere."""

import httpx
import pytest

from gateway.core.errors import UpstreamFailed, UpstreamUnavailable
from gateway.upstream.chunks import TokenChunk, Usage
from gateway.upstream.replica import Replica
from tests.support.raw_replica import CLOSE, LAST_CHUNK, RawReplica, answer, chunk, closed_port_url, ok_head, sse
from tests.upstream.taken import taken

pytestmark = pytest.mark.asyncio(loop_scope="session")  # the loop the async fixtures run in


@pytest.fixture
async def client():
    async with httpx.AsyncClient() as c:
        yield c


@pytest.fixture
async def raw():
    async with RawReplica() as replica:
        yield replica


async def collect(replica: Replica, sampling=None, request_id="req-1"):
    stream = await replica.open([1, 2, 3], sampling or {"max_tokens": 4}, request_id)
    out = []
    try:
        await taken(stream, out)
    finally:
        await stream.aclose()
    return out


async def test_generate_stream_is_decoded_with_logprobs_and_usage(client, raw):
    raw.queue([ok_head(), chunk(sse(
        {"choices": [{"index": 0, "token_ids": [7], "logprobs": {"content": [
            {"token_id": 7, "logprob": -0.5, "rank": 1, "top_logprobs": []}]}}]},
        {"choices": [{"index": 0, "token_ids": [8], "finish_reason": "stop", "stop_reason": 8, "logprobs": {
            "content": [{"token_id": 8, "logprob": -9999.0, "rank": 3, "top_logprobs": []}]}}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                                  "prompt_tokens_details": {"cached_tokens": 2}}},
        b"[DONE]")), LAST_CHUNK])
    replica = Replica(raw.url, client, api="generate", served_model="m")
    chunks = await collect(replica, {"max_tokens": 4, "logprobs": 0})
    path, body = raw.requests[0]
    assert path == "/inference/v1/generate" and body["token_ids"] == [1, 2, 3] and body["stream"] is True
    assert body["sampling_params"]["detokenize"] is False and body["sampling_params"]["logprobs"] == 0
    # Both token events were read at once: they come as one chunk.
    assert chunks == [TokenChunk([7, 8], [-0.5, -9999.0], finish_reason="stop", stop_reason=8),
                      Usage(3, 2, cached_tokens=2)]
    assert replica.inflight == 0 and not raw.aborts


async def test_completions_fallback_body_and_token_id_logprobs(client, raw):
    raw.queue([ok_head(), chunk(sse(
        {"choices": [{"index": 0, "text": "", "token_ids": [5, 6], "logprobs": {
            "tokens": ["token_id:5", "token_id:6"], "token_logprobs": [-1.0, -2.0],
            "top_logprobs": [{"token_id:5": -1.0}, {"token_id:6": -2.0, "token_id:9": -3.0}]},
            "finish_reason": "length"}]},
        b"[DONE]")), LAST_CHUNK])
    chunks = await collect(Replica(raw.url, client, api="completions", served_model="m"),
                           {"max_tokens": 2, "logprobs": 1, "stop_token_ids": [151645]})
    path, body = raw.requests[0]
    assert path == "/v1/completions" and body["prompt"] == [1, 2, 3] and body["max_tokens"] == 2
    assert body["return_token_ids"] is True
    assert body["return_tokens_as_token_ids"] is True and body["stop_token_ids"] == [151645]
    assert chunks == [TokenChunk([5, 6], [-1.0, -2.0], [[(5, -1.0)], [(6, -2.0), (9, -3.0)]], "length")]


async def test_unreachable_replica_is_retryable_and_ejected(client):
    replica = Replica(closed_port_url(), client, api="generate", state="ready")
    with pytest.raises(UpstreamUnavailable, match="unreachable"):
        await replica.open([1], {}, "r")
    assert replica.state == "ejected" and replica.inflight == 0


@pytest.mark.parametrize(("status", "error"), [(503, UpstreamUnavailable), (429, UpstreamUnavailable),
                                               (400, UpstreamFailed)])
async def test_error_statuses(client, raw, status, error):
    raw.queue([answer(status, b"nope")])
    with pytest.raises(error, match="nope"):
        await Replica(raw.url, client, api="generate").open([1], {}, "r")


async def test_error_event_mid_stream_fails_and_aborts(client, raw):
    raw.queue([ok_head(), chunk(sse({"choices": [{"index": 0, "token_ids": [7]}]},
                                    {"error": {"message": "engine died", "code": 500}}))])
    with pytest.raises(UpstreamFailed, match="engine died"):
        await collect(Replica(raw.url, client, api="generate"))
    assert raw.aborts == [{"request_ids": ["generate-tokens-req-1"]}]


async def test_stream_ended_without_done_is_a_failure(client, raw):
    raw.queue([ok_head(), chunk(sse({"choices": [{"index": 0, "token_ids": [7]}]})), LAST_CHUNK])
    with pytest.raises(UpstreamFailed, match="before it finished"):
        await collect(Replica(raw.url, client, api="generate"))


async def test_a_replica_closing_mid_chunk_fails_the_stream_after_its_tokens(client, raw):
    raw.queue([ok_head(), chunk(sse({"choices": [{"index": 0, "token_ids": [7]}]})), b"40\r\ndata: {\"cho", CLOSE])
    replica = Replica(raw.url, client, api="generate", state="ready")
    stream = await replica.open([1], {}, "r")
    seen = []
    with pytest.raises(UpstreamFailed, match="stream broke"):
        await taken(stream, seen)
    await stream.aclose()
    assert seen == [TokenChunk([7])]
    assert replica.wake.is_set() and replica.healthy  # a health check decides
    assert replica.inflight == 0 and not replica.streams


async def test_a_replica_hanging_up_before_answering_is_a_connect_failure(client, raw):
    """The half-open case: the connection opened, then broke before a byte came back."""
    raw.queue([CLOSE])
    replica = Replica(raw.url, client, api="generate", state="ready")
    with pytest.raises(UpstreamUnavailable, match="unreachable"):
        await replica.open([1], {}, "r")
    assert replica.state == "ejected" and replica.inflight == 0


async def test_a_replica_hanging_up_mid_headers_is_retryable(client, raw):
    raw.queue([b"HTTP/1.1 200 OK\r\ncontent-ty", CLOSE])
    replica = Replica(raw.url, client, api="generate", state="ready")
    with pytest.raises(UpstreamUnavailable, match="failed before answering"):
        await replica.open([1], {}, "r")
    assert replica.inflight == 0
