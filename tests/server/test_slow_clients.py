"""Slow clients against a real `vllm-gateway serve` process, over real sockets: 200 slowloris
connections sending their headers a byte at a time, a client sending endless headers, and
WebSocket clients that send `response.create` and never read. Each is closed by a bound
(`--header-timeout`, the header size cap, `--client-write-timeout`), the gateway's RSS stays
bounded, the non-readers' generations are aborted and their slots freed, and a normal request
completes while they hang on (completion is asserted, never a time)."""

from __future__ import annotations

import base64
import os
import select
import socket
import struct
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest

from gateway.server.slow_clients import MAX_HEADER_BYTES
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.gateway_process import gateway_process, memory_kb
from tests.support.waiting import wait_for

MODEL = "tiny-qwen3"
MB = 1024  # kB
EQUALS_64 = 8152  # Qwen3's token for 64 '=': big events from few tokens
N_SLOWLORIS = 200


@pytest.fixture(scope="module")
def stack(qwen_tokenizer_dir, tmp_path_factory) -> Iterator[tuple[FakeVLLM, httpx.Client, int]]:
    log = tmp_path_factory.mktemp("slow") / "gateway.log"
    with FakeVLLM(max_model_len=1_000_000) as fake, \
            gateway_process(qwen_tokenizer_dir, [fake.url], log, "--header-timeout", "2", "--client-write-timeout",
                            "3", "--max-concurrent-requests", "2") as (url, process), \
            httpx.Client(base_url=url, timeout=60) as client:
        yield fake, client, process.pid


def _normal_request(fake: FakeVLLM, client: httpx.Client) -> None:
    fake.queue(Script([9707, 151645]))  # "Hello", <|im_end|>
    response = client.post("/v1/responses", json={"model": MODEL, "input": "hi"})
    assert response.status_code == 200, response.text
    assert response.json()["output"][-1]["content"][0]["text"] == "Hello"


def _address(client: httpx.Client) -> tuple[str, int]:
    return client.base_url.host, client.base_url.port or 80


def _read_until_closed(sock: socket.socket) -> bytes:
    sock.settimeout(30)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass  # what came before the reset is kept
    return data


def test_slowloris_connections_are_closed_at_the_header_deadline_while_others_are_served(stack):
    fake, client, pid = stack
    _normal_request(fake, client)
    before = memory_kb(pid)["VmRSS"]
    conns = []
    for _ in range(N_SLOWLORIS):
        sock = socket.create_connection(_address(client))
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: gateway\r\nX-Slow: ")
        conns.append(sock)
    _normal_request(fake, client)  # served while all 200 hang on
    open_conns, closed = list(conns), []
    deadline = time.monotonic() + 60
    while open_conns and time.monotonic() < deadline:  # a byte on each, until the gateway answers
        readable, _, _ = select.select(open_conns, [], [], 0.3)
        for sock in readable:
            open_conns.remove(sock)
            closed.append(sock)
        for sock in open_conns:
            sock.send(b"a")
        during = memory_kb(pid)["VmRSS"]
    assert not open_conns, f"{len(open_conns)} slowloris connections still open"
    answers = {_read_until_closed(sock).split(b"\r\n", 1)[0] for sock in closed}
    assert answers == {b"HTTP/1.1 408 Request Timeout"}
    for sock in conns:
        sock.close()
    assert during - before < 16 * MB, (before, during)
    _normal_request(fake, client)


def test_endless_headers_get_a_431_and_the_connection_closed(stack):
    fake, client, pid = stack
    before = memory_kb(pid)["VmRSS"]
    line = b"X-Junk: " + b"j" * 1000 + b"\r\n"
    with socket.create_connection(_address(client)) as sock:  # just over the cap, then nothing more
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: gateway\r\n" + line * (MAX_HEADER_BYTES // len(line) + 2))
        assert _read_until_closed(sock).startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    with socket.create_connection(_address(client)) as sock:  # endless: closed while it still sends
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: gateway\r\n")
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for _ in range(100 * MAX_HEADER_BYTES // len(line)):
                sock.sendall(line)
    assert memory_kb(pid)["VmRSS"] - before < 16 * MB
    _normal_request(fake, client)


def _answer(raw: bytes) -> tuple[bytes, dict]:
    """The status line and the JSON body of a raw HTTP answer."""
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"\r\ncontent-type: application/json\r\n" in head, head
    return head.split(b"\r\n", 1)[0], orjson.loads(body)


def test_a_request_line_over_the_cap_gets_a_431_in_the_apis_json_shape(stack):
    fake, client, _ = stack
    for path, want in (
            (b"/v1/responses", {"error": {"message": f"The request line and headers exceed {MAX_HEADER_BYTES} bytes.",
                                          "type": "invalid_request_error", "param": None,
                                          "code": "request_header_fields_too_large"}}),
            (b"/v1/messages", {"type": "error", "error": {
                "type": "invalid_request_error",
                "message": f"The request line and headers exceed {MAX_HEADER_BYTES} bytes."}})):
        with socket.create_connection(_address(client)) as sock:
            sock.sendall(b"GET " + path + b"?q=" + b"x" * (MAX_HEADER_BYTES + 1) + b" HTTP/1.1\r\nHost: g\r\n\r\n")
            assert _answer(_read_until_closed(sock)) == (b"HTTP/1.1 431 Request Header Fields Too Large", want)
    _normal_request(fake, client)


def test_a_header_timeout_and_an_unparsable_request_answer_json_errors(stack):
    _, client, _ = stack
    with socket.create_connection(_address(client)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\n")  # and nothing more
        status, body = _answer(_read_until_closed(sock))
    assert status == b"HTTP/1.1 408 Request Timeout"
    assert body == {"error": {"message": "The request headers did not arrive within 2 s.",
                              "type": "invalid_request_error", "param": None, "code": "request_timeout"}}
    with socket.create_connection(_address(client)) as sock:
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: g\r\nContent-Length: x\r\n\r\n")
        status, body = _answer(_read_until_closed(sock))
    assert status == b"HTTP/1.1 400 Bad Request"
    assert body["error"]["code"] == "invalid_http_request" and body["error"]["type"] == "invalid_request_error"


def _ws_connect(address: tuple[str, int]) -> socket.socket:
    """A WebSocket on /v1/responses from a client with a tiny receive buffer, handshake done."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(address)
    key = base64.b64encode(os.urandom(16))
    sock.sendall(b"GET /v1/responses HTTP/1.1\r\nHost: gateway\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def _ws_text(sock: socket.socket, payload: dict) -> None:
    data, mask = orjson.dumps(payload), os.urandom(4)
    header = bytes([0x81]) + (bytes([0x80 | len(data)]) if len(data) < 126 else
                              bytes([0x80 | 126]) + struct.pack("!H", len(data)))
    sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))


def _live(client: httpx.Client, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_an_sse_client_that_reads_slowly_gets_every_token_in_order(stack):
    """6.4 MB of deltas to a client that reads nothing for 2 s: the relay waits on uvicorn's flow
    control (the replica's connection paused meanwhile) and loses nothing."""
    fake, client, _ = stack
    fake.reset()
    n_tokens = 100_000
    fake.queue(Script([EQUALS_64] * n_tokens + [151645], chunks=[100] * 1000 + [1]))
    body = {"model": MODEL, "input": "print a long line", "stream": True}
    with client.stream("POST", "/v1/responses", json=body) as response:
        assert response.status_code == 200
        time.sleep(2)
        text = response.read().decode()
    events = [orjson.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == "=" * 64 * n_tokens
    assert events[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_websocket_clients_that_never_read_are_closed_and_their_generations_aborted(stack):
    fake, client, pid = stack
    fake.reset()
    _normal_request(fake, client)
    before = memory_kb(pid)["VmRSS"]
    # 100,000 tokens of 64 characters (6.4 MB of deltas, more than the sockets' buffers hold),
    # then the replica keeps the stream open: only the gateway's abort ends it
    for _ in range(2):
        fake.queue(Script([EQUALS_64] * 100_000, chunks=[100] * 1000, hang=True))
    readers = [_ws_connect(_address(client)) for _ in range(2)]
    for sock in readers:
        _ws_text(sock, {"type": "response.create", "model": MODEL, "input": "print a long line"})
    wait_for(lambda: len(fake.bodies("/inference/v1/generate")) == 3, "both generations started")
    # their two slots are all --max-concurrent-requests has; once the non-readers are closed
    # (the client read nothing for 3 s), their generations are aborted and the slots come back
    wait_for(lambda: _live(client, "gateway_websocket_connections") == 0, "the non-readers were closed", timeout=90)
    wait_for(lambda: len(fake.disconnected) == 2, "both generations were aborted")
    after = memory_kb(pid)
    _normal_request(fake, client)
    for sock in readers:
        sock.close()
    assert after["VmRSS"] - before < 64 * MB, (before, after)


def test_a_websocket_client_that_never_reads_one_frame_larger_than_the_buffers_is_closed(stack):
    fake, client, _ = stack
    fake.reset()
    # all 200,000 tokens in one event: one delta frame of 12.8 MB, then the replica keeps the
    # stream open; no send follows the one the client never takes, and still it is closed
    fake.queue(Script([EQUALS_64] * 200_000, chunks=[200_000], hang=True))
    reader = _ws_connect(_address(client))
    _ws_text(reader, {"type": "response.create", "model": MODEL, "input": "print a long line"})
    wait_for(lambda: len(fake.bodies("/inference/v1/generate")) == 1, "the generation started")
    wait_for(lambda: _live(client, "gateway_websocket_connections") == 0, "the non-reader was closed")
    wait_for(lambda: len(fake.disconnected) == 1, "its generation was aborted")
    _normal_request(fake, client)
    reader.close()
