"""Upstream faults injected with respx; the happy paths run against real vLLM elsewhere."""

import httpx
import orjson
import pytest
import respx

from gateway.core.errors import UpstreamFailed, UpstreamUnavailable
from gateway.upstream.chunks import TokenChunk, Usage
from gateway.upstream.replica import Replica

URL = "http://replica-a:8000"


def sse(*payloads) -> bytes:
    return b"".join(b"data: " + (p if isinstance(p, bytes) else orjson.dumps(p)) + b"\n\n" for p in payloads)


@pytest.fixture
async def client():
    async with httpx.AsyncClient() as c:
        yield c


async def collect(replica: Replica, sampling=None):
    stream = await replica.open([1, 2, 3], sampling or {"max_tokens": 4}, "req-1")
    out = []
    try:
        async for chunk in stream:
            out.append(chunk)
    finally:
        await stream.aclose()
    return out


@respx.mock
async def test_generate_stream_is_decoded_with_logprobs_and_usage(client):
    route = respx.post(URL + "/inference/v1/generate").mock(return_value=httpx.Response(200, content=sse(
        {"choices": [{"index": 0, "token_ids": [7], "logprobs": {"content": [
            {"token_id": 7, "logprob": -0.5, "rank": 1, "top_logprobs": []}]}}]},
        {"choices": [{"index": 0, "token_ids": [8], "finish_reason": "stop", "stop_reason": 8, "logprobs": {
            "content": [{"token_id": 8, "logprob": -9999.0, "rank": 3, "top_logprobs": []}]}}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                                  "prompt_tokens_details": {"cached_tokens": 2}}},
        b"[DONE]")))
    replica = Replica(URL, client, api="generate", served_model="m")
    chunks = await collect(replica, {"max_tokens": 4, "logprobs": 0})
    body = orjson.loads(route.calls[0].request.content)
    assert body["token_ids"] == [1, 2, 3] and body["stream"] is True
    assert body["sampling_params"]["detokenize"] is False and body["sampling_params"]["logprobs"] == 0
    # Both token events were read at once: they come as one chunk.
    assert chunks == [TokenChunk([7, 8], [-0.5, -9999.0], finish_reason="stop", stop_reason=8),
                      Usage(3, 2, cached_tokens=2)]
    assert replica.inflight == 0


@respx.mock
async def test_completions_fallback_body_and_token_id_logprobs(client):
    route = respx.post(URL + "/v1/completions").mock(return_value=httpx.Response(200, content=sse(
        {"choices": [{"index": 0, "text": "", "token_ids": [5, 6], "logprobs": {
            "tokens": ["token_id:5", "token_id:6"], "token_logprobs": [-1.0, -2.0],
            "top_logprobs": [{"token_id:5": -1.0}, {"token_id:6": -2.0, "token_id:9": -3.0}]},
            "finish_reason": "length"}]},
        b"[DONE]")))
    chunks = await collect(Replica(URL, client, api="completions", served_model="m"),
                           {"max_tokens": 2, "logprobs": 1, "stop_token_ids": [151645]})
    body = orjson.loads(route.calls[0].request.content)
    assert body["prompt"] == [1, 2, 3] and body["max_tokens"] == 2 and body["return_token_ids"] is True
    assert body["return_tokens_as_token_ids"] is True and body["stop_token_ids"] == [151645]
    assert chunks == [TokenChunk([5, 6], [-1.0, -2.0], [[(5, -1.0)], [(6, -2.0), (9, -3.0)]], "length")]


@respx.mock
async def test_unreachable_replica_is_retryable(client):
    respx.post(URL + "/inference/v1/generate").mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(UpstreamUnavailable, match="unreachable"):
        await Replica(URL, client, api="generate").open([1], {}, "r")


@respx.mock
@pytest.mark.parametrize(("status", "error"), [(503, UpstreamUnavailable), (429, UpstreamUnavailable),
                                               (400, UpstreamFailed)])
async def test_error_statuses(client, status, error):
    respx.post(URL + "/inference/v1/generate").mock(return_value=httpx.Response(status, text="nope"))
    with pytest.raises(error, match="nope"):
        await Replica(URL, client, api="generate").open([1], {}, "r")


@respx.mock
async def test_error_event_mid_stream_fails_and_aborts(client):
    respx.post(URL + "/inference/v1/generate").mock(return_value=httpx.Response(200, content=sse(
        {"choices": [{"index": 0, "token_ids": [7]}]}, {"error": {"message": "engine died", "code": 500}})))
    abort = respx.post(URL + "/inference/v1/abort_requests").mock(return_value=httpx.Response(200))
    with pytest.raises(UpstreamFailed, match="engine died"):
        await collect(Replica(URL, client, api="generate"))
    assert orjson.loads(abort.calls[0].request.content) == {"request_ids": ["generate-tokens-req-1"]}


@respx.mock
async def test_stream_cut_without_done_is_a_failure(client):
    respx.post(URL + "/inference/v1/generate").mock(return_value=httpx.Response(200, content=sse(
        {"choices": [{"index": 0, "token_ids": [7]}]})))
    respx.post(URL + "/inference/v1/abort_requests").mock(return_value=httpx.Response(200))
    with pytest.raises(UpstreamFailed, match="before it finished"):
        await collect(Replica(URL, client, api="generate"))
