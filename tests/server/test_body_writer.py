"""The direct writers under real uvicorn with the gateway's protocols: the body writer
(gateway/server/body_writer.py) writes exactly the chunks uvicorn's `send` would, refuses where
`send` must act, and holds to uvicorn's flow control for a client that reads slowly; the
WebSocket frame writer (gateway/server/_ws_frames.py) sends text messages, compressed when the
client asked for it, and refuses before the handshake."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import httpx

from gateway.server.body_writer import BodyWriter
from gateway.server.slow_clients import BoundedClose, BoundedHeaders
from gateway.ws.frames import frame_writer
from tests.support.threaded_server import serve_in_thread

BIG = 16 * 1024 * 1024  # far above uvicorn's write high-water mark and the socket buffers
PIECE = b"x" * 65536


class App:
    """GET /chunks: two chunks through the writer. /length: a content-length body. /big: BIG bytes
    through the writer, waiting for the drain whenever it is paused."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}
        self.paused = threading.Event()  # /big's writer was paused by uvicorn's flow control

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path, writer = scope["path"], BodyWriter.of(scope)
        seen = self.seen[f"{scope['method']} {path}"] = {"writer": writer is not None}
        if writer is not None:
            seen["before_start"] = writer.write(b"early")
        headers = [(b"content-length", b"5")] if path == "/length" else []
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if path == "/big":
            seen["paused"] = 0
            written = 0
            while written < BIG:
                assert writer.write(PIECE)
                written += len(PIECE)
                if writer.paused:
                    seen["paused"] += 1
                    self.paused.set()
                    await writer.drain()
        elif writer is not None:
            seen["writes"] = [writer.write(b"hello"), writer.write(b" world")]
            if path == "/length":
                await send({"type": "http.response.body", "body": b"12345"})
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _serve(app: App) -> Any:
    return serve_in_thread(app, "the test app", http=lambda *a, **k: BoundedHeaders(*a, header_timeout=30, **k))


def test_chunks_written_directly_arrive_as_the_body():
    app = App()
    with _serve(app) as port:
        response = httpx.get(f"http://127.0.0.1:{port}/chunks")
    assert response.status_code == 200 and response.headers["transfer-encoding"] == "chunked"
    assert response.content == b"hello world"
    assert app.seen["GET /chunks"] == {"writer": True, "before_start": False, "writes": [True, True]}


def test_the_writer_refuses_a_content_length_body_and_a_head_request():
    app = App()
    with _serve(app) as port:
        fixed = httpx.get(f"http://127.0.0.1:{port}/length")
        head = httpx.head(f"http://127.0.0.1:{port}/chunks")
    assert fixed.content == b"12345"  # only what `send` wrote
    assert app.seen["GET /length"]["writes"] == [False, False]
    assert head.status_code == 200 and head.content == b""
    assert app.seen["HEAD /chunks"]["writes"] == [False, False]


def test_a_slow_reader_pauses_the_writer_and_gets_every_byte():
    app = App()
    with _serve(app) as port, socket.create_connection(("127.0.0.1", port)) as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        client.sendall(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
        assert app.paused.wait(timeout=60)  # read nothing until the server's buffer passes its high-water mark
        received = bytearray()
        while not received.endswith(b"0\r\n\r\n"):
            data = client.recv(1 << 20)
            assert data, "the server closed early"
            received += data
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    assert _unchunked(body) == PIECE * (BIG // len(PIECE))
    assert app.seen["GET /big"]["paused"] > 0  # the writer saw uvicorn's flow control


def test_no_writer_under_another_server():
    """In-process (httpx's ASGI transport) there is no writer: the app sends through ASGI."""
    app = App()

    async def run() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as client:
            return await client.get("/chunks")
    assert asyncio.run(run()).status_code == 200
    assert app.seen["GET /chunks"] == {"writer": False}


def _unchunked(body: bytes) -> bytes:
    out = bytearray()
    while True:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return bytes(out)
        out += rest[:size]
        body = rest[size + 2:]


class SocketApp:
    """A WebSocket that writes three messages through the frame writer, then closes."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}
        self.paused = threading.Event()  # /big's writer was paused by uvicorn's flow control

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        writer = frame_writer(scope)
        await receive()  # websocket.connect
        self.seen["before_accept"] = writer is not None and writer.write(b"{}")
        await send({"type": "websocket.accept"})
        self.seen["writes"] = [writer.write(b'{"n":%d,"text":"%s"}' % (i, b"=" * 2000)) for i in range(3)]
        self.seen["paused"] = writer.paused
        await send({"type": "websocket.close", "code": 1000})


def test_messages_written_directly_arrive_as_text_messages_compressed_or_not():
    from websockets.sync.client import connect

    for compression in ("deflate", None):
        app = SocketApp()
        with serve_in_thread(app, "the socket app", ws=BoundedClose, ws_per_message_deflate=True) as port, \
                connect(f"ws://127.0.0.1:{port}/", compression=compression) as socket_:
            messages = [socket_.recv() for _ in range(3)]
        assert [m[:7] for m in messages] == ['{"n":0,', '{"n":1,', '{"n":2,'] and all(isinstance(m, str) for m in messages)
        assert app.seen == {"before_accept": False, "writes": [True, True, True], "paused": False}
