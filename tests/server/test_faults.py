"""A misbehaving replica and clients that leave: every case ends with a clean bounded answer,
the upstream generation aborted, and in-flight counts and admission slots back to baseline."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.support.fake_vllm import Script
from tests.support.stack import Stack, fake_stack
from tests.support.waiting import wait_for

IM_END = 151645
TOKENS = [9707, 1879, 13, 358, 1079, IM_END]
BODY = {"model": "tiny-qwen3", "input": "hi"}
MODEL_PATHS = ["/v1/responses", "/v1/chat/completions", "/v1/messages"]


@pytest.fixture(scope="module")
def impatient(qwen_tokenizer_dir) -> Iterator[Stack]:
    """Short upstream timeouts: stalls end in a bounded time."""
    with fake_stack(qwen_tokenizer_dir, served_model_name="tiny-qwen3", health_interval=0.1,
                    health_backoff_max=0.2, upstream_idle_timeout=0.5, upstream_header_timeout=0.5,
                    outlier_base_ejection_time=0.1) as stack:
        yield stack


@pytest.fixture(scope="module")
def patient(qwen_tokenizer_dir) -> Iterator[Stack]:
    """Long upstream timeouts and one admission slot: only the client leaving can free it."""
    with fake_stack(qwen_tokenizer_dir, served_model_name="tiny-qwen3", upstream_idle_timeout=60,
                    upstream_header_timeout=60, request_body_timeout=0.5, max_concurrent_requests=1) as stack:
        yield stack


@pytest.fixture(autouse=True)
def _fresh(request) -> None:
    for name in ("impatient", "patient"):
        if name in request.fixturenames:
            stack = request.getfixturevalue(name)
            settled(stack)
            stack.reset()


def settled(stack: Stack) -> None:
    """Back to baseline: the replica routable, nothing in flight, and no request in progress (its
    admission slot is given back before the outermost middleware counts it ended)."""
    wait_for(lambda: all(r.healthy and r.inflight == 0 and not r.streams for r in stack.runtime.pool.replicas)
             and _in_progress(stack) == 0, "the replica routable and nothing in flight")


def _in_progress(stack: Stack) -> float:
    lines = httpx.get(stack.url + "/metrics").text.splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith("gateway_requests_in_progress"))


def sse_events(response: httpx.Response) -> list[dict]:
    return [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]


def assert_openai_error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    assert "http://" not in error["message"] and "127.0.0.1" not in error["message"]  # no internals
    return error


def assert_served(stack: Stack) -> None:
    """A new request is served: no slot, stream or replica was left behind."""
    stack.fake.queue(Script(TOKENS))
    response = httpx.post(stack.url + "/v1/responses", json=BODY, timeout=10)
    assert response.status_code == 200 and response.json()["status"] == "completed"


# -- a misbehaving replica ---------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_a_replica_stalled_before_its_headers_is_a_504_and_suspected(impatient, stream):
    impatient.fake.queue(Script(TOKENS, header_delay=3))
    response = httpx.post(impatient.url + "/v1/responses", json={**BODY, "stream": stream}, timeout=10)
    assert_openai_error(response, 504, "upstream_timeout")
    assert impatient.runtime.pool.replicas[0].inflight == 0
    settled(impatient)  # ejected, then re-admitted by its health checks
    assert_served(impatient)


def test_a_stream_stalled_mid_way_fails_with_response_failed_and_is_aborted(impatient):
    impatient.fake.queue(Script(TOKENS, stall_after=2))
    with httpx.stream("POST", impatient.url + "/v1/responses", json={**BODY, "stream": True}, timeout=10) as r:
        events = sse_events(r)
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "Hello world"
    assert events[-1]["type"] == "response.failed"
    error = events[-1]["response"]["error"]  # OpenAI's ResponseErrorCode; the gateway's own code leads the message
    assert error["code"] == "server_error" and error["message"].startswith("upstream_timeout: ")
    wait_for(lambda: len(impatient.fake.aborted) == 1)
    settled(impatient)
    assert_served(impatient)


def test_a_json_answer_stalled_mid_way_is_a_504(impatient):
    impatient.fake.queue(Script(TOKENS, stall_after=1))
    assert_openai_error(httpx.post(impatient.url + "/v1/responses", json=BODY, timeout=10), 504, "upstream_timeout")
    wait_for(lambda: len(impatient.fake.aborted) == 1)


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/chat/completions"])
def test_a_malformed_chunk_ends_the_stream_cleanly(impatient, path):
    impatient.fake.queue(Script(TOKENS, malformed_after=2, stall_after=2))
    body = BODY if path == "/v1/responses" else {"model": "tiny-qwen3", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", impatient.url + path, json={**body, "stream": True}, timeout=10) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data:")]
    if path == "/v1/responses":
        final = json.loads(lines[-1][5:])
        assert final["type"] == "response.failed" and final["response"]["error"]["code"] == "server_error"
        assert final["response"]["error"]["message"].startswith("upstream_error: ")
    else:
        assert lines[-1] == "data: [DONE]" and json.loads(lines[-2][5:])["error"]["code"] == "upstream_error"
    wait_for(lambda: len(impatient.fake.aborted) == 1)
    impatient.fake.queue(Script(TOKENS, malformed_after=2, stall_after=2))
    assert_openai_error(httpx.post(impatient.url + path, json=body, timeout=10), 502, "upstream_error")
    settled(impatient)


def test_a_replicas_400_is_a_400_with_its_reason(impatient):
    impatient.fake.queue(Script([], status=400, error_message="top_k must be 0 (disable), or at least 1"))
    error = assert_openai_error(httpx.post(impatient.url + "/v1/responses", json=BODY, timeout=10), 400,
                                "upstream_rejected")
    assert error["message"].endswith("top_k must be 0 (disable), or at least 1")


@pytest.mark.parametrize("status", [403, 404])
def test_a_replicas_403_or_404_is_the_deployments_fault_a_502(impatient, status):
    """The gateway builds the upstream request (path, model name, token ids): a replica refusing
    the endpoint (no --enable-scale-out, an older vLLM) is no fault of the client's request."""
    impatient.fake.queue(Script([], status=status, error_message="Not Found"))
    error = assert_openai_error(httpx.post(impatient.url + "/v1/responses", json=BODY, timeout=10), 502,
                                "upstream_error")
    assert error["message"] == "The model server failed while generating." and "Not Found" not in error["message"]
    assert_served(impatient)


# -- clients that leave ------------------------------------------------------------------

def test_a_client_leaving_before_the_headers_frees_its_slot(patient):
    answer = threading.Event()
    patient.fake.queue(Script(TOKENS, headers_until=answer))
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(patient.url + "/v1/responses", json={**BODY, "stream": True}, timeout=0.5)
        settled(patient)  # while the replica still holds its answer
        assert_served(patient)  # one slot: a 429 if it were still held
    finally:
        answer.set()


def _body(path: str, **fields) -> dict:
    """A minimal request of the API at `path`."""
    if path == "/v1/responses":
        return {**BODY, **fields}
    return {"model": "tiny-qwen3", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100, **fields}


@pytest.mark.parametrize("path", MODEL_PATHS)
def test_a_json_client_leaving_mid_generation_aborts_it(patient, path):
    """Every API's routes are made alike (gateway/server/http.py `model_route`): the disconnect
    watcher is there by construction."""
    patient.fake.queue(Script(TOKENS, stall_after=1))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(patient.url + path, json=_body(path), timeout=0.5)
    wait_for(lambda: len(patient.fake.aborted) == 1)
    settled(patient)
    assert_served(patient)


@pytest.mark.parametrize("path", MODEL_PATHS)
def test_a_streaming_client_leaving_mid_generation_aborts_it(patient, path):
    """Each streaming API relays from the upstream read (Turn.relay): a client that leaves while
    the replica still generates ends the generation, and its slot comes back."""
    patient.fake.queue(Script(TOKENS, stall_after=2))
    with httpx.stream("POST", patient.url + path, json=_body(path, stream=True), timeout=10) as response:
        assert response.status_code == 200
        seen = b""
        for data in response.iter_bytes():
            seen += data
            if b" world" in seen:
                break  # the client leaves while the replica stalls after two tokens ("Hello", " world")
    wait_for(lambda: len(patient.fake.aborted) == 1)
    settled(patient)
    assert_served(patient)


def test_a_websocket_closed_mid_stream_aborts_its_generation(patient):
    patient.fake.queue(Script(TOKENS, stall_after=2))

    async def leave() -> str:
        async with connect(patient.url.replace("http", "ws") + "/v1/responses") as ws:
            await ws.send(json.dumps({"type": "response.create", **BODY}))
            seen = ""
            while seen != "Hello world":
                event = json.loads(await ws.recv())
                if event["type"] == "response.output_text.delta":
                    seen += event["delta"]
            return seen

    assert asyncio.run(leave()) == "Hello world"
    wait_for(lambda: len(patient.fake.aborted) == 1)
    settled(patient)
    assert_served(patient)


@pytest.mark.parametrize("path", MODEL_PATHS)
def test_a_body_that_never_arrives_is_a_408_and_frees_its_slot(patient, path):
    host, port = patient.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        raw.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                    b"content-length: 100\r\n\r\n{")
        answer = raw.recv(65536).decode()
    assert answer.startswith("HTTP/1.1 408")
    error = json.loads(answer.split("\r\n\r\n", 1)[1])
    if path == "/v1/messages":  # in Anthropic's shape
        assert error["type"] == "error" and "did not arrive" in error["error"]["message"]
    else:
        assert error["error"]["code"] == "request_timeout"
    assert_served(patient)


# -- failures and state ------------------------------------------------------------------

def test_a_failed_http_continuation_leaves_the_stored_response(patient):
    patient.fake.queue(Script(TOKENS))
    first = httpx.post(patient.url + "/v1/responses", json={**BODY, "store": True}, timeout=10).json()
    bad = {**BODY, "previous_response_id": first["id"], "temperature": 9}
    assert_openai_error(httpx.post(patient.url + "/v1/responses", json=bad, timeout=10), 400, "invalid_value")
    patient.fake.queue(Script(TOKENS))
    retry = httpx.post(patient.url + "/v1/responses", json={**bad, "temperature": 1}, timeout=10)
    assert retry.status_code == 200 and retry.json()["previous_response_id"] == first["id"]


def test_a_failed_websocket_continuation_evicts_the_cached_response(patient):
    patient.fake.queue(Script(TOKENS))

    async def run() -> list[dict]:
        async with connect(patient.url.replace("http", "ws") + "/v1/responses") as ws:
            async def create(**fields) -> dict:
                await ws.send(json.dumps({"type": "response.create", **BODY, "store": False, **fields}))
                while True:
                    event = json.loads(await ws.recv())
                    if event["type"] in ("response.completed", "response.failed", "error"):
                        return event
            first = await create()
            failed = await create(previous_response_id=first["response"]["id"], top_k=-5)
            again = await create(previous_response_id=first["response"]["id"])
            return [first, failed, again]

    first, failed, again = asyncio.run(run())
    assert first["type"] == "response.completed"
    assert failed["type"] == "error" and failed["error"]["param"] == "top_k"
    assert again["type"] == "error" and again["error"]["code"] == "previous_response_not_found"
