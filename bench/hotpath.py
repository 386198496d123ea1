"""The relay's per-token path alone: one upstream read in, one client write out, no sockets.

At engine pace a token costs the gateway one `read`, one `write` and the Python in between.
The kernel's part depends on the machine (on a nested-virtualised VM a system call costs
several microseconds); this measures the rest, deterministically: N Responses SSE streams are
set up as `POST /v1/responses` sets them up (the turn as the route builds it, the exchange writer's push relay, the body writer), their
upstream connections get fake transports, and the loop feeds each connection one vLLM
`/inference/v1/generate` event per read, round-robin, as an engine step does. The client
"write" only counts.

    python -m bench.hotpath                    # µs per token (min and median of 7 rounds)
    python -m bench.hotpath --instructions     # the same loop under callgrind: instructions per token

Instructions are what to compare between two versions of the hot path on a noisy machine:
callgrind counts the timed loop only (instrumentation is switched on around it), the same
for the same code whatever else runs. It reaches into three private names (the route's
`sse_sink`, the SSE response's `_Body`, the turn's stream) to skip the sockets.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import orjson

from bench.models import MODELS
from gateway.adapters.responses.turn import from_http
from gateway.core.settings import Settings
from gateway.server.app import build_runtime
from gateway.server.body_writer import BodyWriter
from gateway.server.http import _Body
from gateway.server.routes.responses import sse_sink
from gateway.upstream.connection import Connection
from gateway.upstream.stream import UpstreamStream

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class _Transport:
    """Both ends' transport: writes are counted (the last one kept), nothing is sent."""

    def __init__(self, counter: list[int]) -> None:
        self._counter = counter
        self.last = b""

    def write(self, data: bytes) -> None:
        self._counter[0] += 1
        self.last = data

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None: ...

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def _read(token: int) -> bytes:
    """One engine step's read for one stream: vLLM's event in one HTTP chunk."""
    data = (b'data: {"request_id":"gw_0123456789abcdef","usage":null,"output_mode":"tokens","choices":'
            b'[{"index":0,"finish_reason":null,"stop_reason":null,"token_ids":[%d],"logprobs":null}]}\n\n' % token)
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _streams(n: int, written: list[int], fmt: str
                   ) -> tuple[list[Callable[[bytes], None]], list[asyncio.Task], list[_Transport]]:
    """`n` relaying Responses SSE streams: each one's upstream `data_received`, its task, and
    its client transport."""
    model = MODELS[fmt]()
    url = "http://127.0.0.1:9"
    settings = Settings(model=str(model.model_dir), upstreams=[url], served_model_name=model.name,
                        chat_format=model.chat_format)
    runtime = build_runtime(settings)
    runtime.pool.sync([url], watch=False)
    replica = runtime.pool.replicas[0]
    replica.api = "generate"
    body = orjson.dumps({"model": model.name, "input": "Write about a fox.", "stream": True, "store": False})
    reads, tasks, clients = [], [], []
    for _ in range(n):
        made = await from_http(runtime, body, settings)
        turn = made.turn
        await turn.render()
        connection = Connection(replica.connections)
        connection.connection_made(_Transport(written))  # type: ignore[arg-type]
        stream = UpstreamStream(replica, turn.record.request_id)
        stream.connection = connection
        connection.send(b"", stream, None)
        connection.data_received(HEAD)
        turn._stream = stream  # what Turn.start() does once a replica accepted
        replica.inflight += 1
        clients.append(_Transport(written))
        cycle = types.SimpleNamespace(disconnected=False, response_started=True, response_complete=False,
                                      chunked_encoding=True, transport=clients[-1],
                                      flow=types.SimpleNamespace(write_paused=False))
        answer = _Body(BodyWriter(cycle), None)  # type: ignore[arg-type]
        answer.started = True  # the headers went out with response.created
        output = made.output(sse_sink(answer.write))
        output.started(turn)
        tasks.append(asyncio.create_task(turn.relay(output.events)))
        reads.append(connection.data_received)
    for _ in range(5):
        await asyncio.sleep(0)  # each relay now waits for its stream's reads
    return reads, tasks, clients


async def measure(streams: int, tokens: int, rounds: int, callgrind: bool, fmt: str = "qwen") -> dict[str, Any]:
    written = [0]
    reads, tasks, clients = await _streams(streams, written, fmt)
    steps = tokens // streams // rounds
    model = MODELS[fmt]()
    words = model.output(steps * rounds)
    pieces = [_read(token) for token in words[:steps * rounds]]
    written[0] = 0
    if callgrind:
        _instrument("on")
    per_token = []
    for r in range(rounds):
        started = time.process_time()
        for piece in pieces[r * steps:(r + 1) * steps]:
            for data_received in reads:
                data_received(piece)
        per_token.append((time.process_time() - started) / (steps * streams) * 1e6)
    if callgrind:
        _instrument("off")
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    per_token.sort()
    # what a client got last: the last word as one Responses delta event, in one HTTP chunk
    _, event = clients[-1].last.split(b"\r\n", 1)[1].split(b"\ndata: ", 1)
    last_delta = orjson.loads(event.rsplit(b"\n\n", 1)[0])
    return {"format": fmt, "streams": streams, "tokens": steps * rounds * streams, "client_writes": written[0],
            "last_event": last_delta["type"], "last_delta": last_delta["delta"],
            "us_per_token_min": round(per_token[0], 2), "us_per_token_median": round(per_token[len(per_token) // 2], 2)}


def _instrument(state: str) -> None:
    """Switch callgrind's counting on or off for this process (blocking: nothing else runs)."""
    subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], capture_output=True, check=False)
    time.sleep(1)  # callgrind notices the command between blocks


def _instructions(argv: list[str]) -> int:
    """This module's loop under callgrind: its instructions per token."""
    if shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind (Debian: apt-get install valgrind)")
    out = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
                          sys.executable, "-m", "bench.hotpath", "--under-callgrind", *argv],
                         capture_output=True, text=True, check=True)
    collected = int(re.search(r"Collected : (\d+)", out.stderr).group(1))
    result = orjson.loads(out.stdout.strip().splitlines()[-1])
    print(f"{collected / result['tokens']:.0f} instructions per token ({result['format']}, {result['streams']} streams, "
          f"{result['tokens']} tokens, {result['client_writes']} client writes)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hotpath", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=51_200, help="in all, over every stream and round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--format", choices=("qwen", "harmony"), default="qwen",
                        help="the output format relayed (bench/models.py)")
    parser.add_argument("--instructions", action="store_true", help="count instructions under callgrind")
    parser.add_argument("--under-callgrind", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.instructions:
        return _instructions(["--streams", str(args.streams), "--tokens", str(args.tokens), "--rounds", "1",
                              "--format", args.format])
    import uvloop

    result = uvloop.run(measure(args.streams, args.tokens, args.rounds, args.under_callgrind, args.format))
    print(orjson.dumps(result).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
