"""A replica that answers with scripted raw bytes, for faults no well-behaved server makes.

Each generation request takes the next queued script: a list of byte strings written one
write each (so a test decides where the chunk boundaries fall), `Pause(seconds)`, or `CLOSE`
(hang up, mid-chunk or before a byte). After its script a response's connection stays open
for the next request (keep-alive) unless the script closed it. Abort calls are answered 200
and recorded; `connections` counts the TCP connections accepted.

    async with RawReplica() as replica:
        replica.queue([ok_head(), chunk(sse(...)), LAST_CHUNK])
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from dataclasses import dataclass
from typing import Self

import orjson


@dataclass
class Pause:
    seconds: float


CLOSE = object()
LAST_CHUNK = b"0\r\n\r\n"


def ok_head() -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(*payloads: object) -> bytes:
    return b"".join(b"data: " + (p if isinstance(p, bytes) else orjson.dumps(p)) + b"\n\n" for p in payloads)


def answer(status: int, body: bytes) -> bytes:
    return b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n\r\n%s" % (status, len(body), body)


def closed_port_url() -> str:
    """A loopback address where nothing listens: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


class RawReplica:
    def __init__(self) -> None:
        self.scripts: deque[list] = deque()
        self.requests: list[tuple[str, dict]] = []  # (path, body) of every request, aborts included
        self.connections = 0
        self.closed = asyncio.Event()  # a client closed a connection (set each time)
        self._server: asyncio.Server | None = None

    def queue(self, *scripts: list) -> None:
        self.scripts.extend(scripts)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    @property
    def aborts(self) -> list[dict]:
        return [body for path, body in self.requests if path.endswith("abort_requests")]

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                path = lines[0].split()[1]
                length = next(int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length"))
                self.requests.append((path, orjson.loads(await reader.readexactly(length))))
                if path.endswith("abort_requests"):
                    writer.write(answer(200, b"{}"))
                    continue
                for step in self.scripts.popleft():
                    if step is CLOSE:
                        writer.close()
                        return
                    if isinstance(step, Pause):
                        await asyncio.sleep(step.seconds)
                    else:
                        writer.write(step)
                        await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed.set()
            writer.close()
