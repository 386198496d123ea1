"""The load generator: raw HTTP/1.1 over asyncio streams, SSE counted, never parsed.

It runs in its own process (pinned to a core of its own where possible) so the
gateway's core does nothing but relay. Per read it takes one timestamp and finds
token-bearing events by a byte marker (`response.…_text.delta` events from the gateway,
`"token_ids":[` chunks straight from the token server): far cheaper per token than the
gateway's own work, so it is not what limits a measurement. Straight from the token
server every marker is one token; the gateway relays the tokens it reads at once as one
delta, so with `"count": "words"` a delta event counts one token per space in its text
(the benchmark scripts are words of one token each, with a leading space).

Input (one JSON object on stdin), output (one JSON object on stdout):

    {"port": 8080, "path": "/v1/responses", "body": "... __TAG__ ...", "streams": 64,
     "requests": 2, "tag_base": 100000, "marker": "_text.delta\\n", "count": "words",
     "timings_port": 8000, "content_offset": 0, "cpu": 1, "window_s": 10}
    -> {"wall_s": …, "tokens": …, "requests": […{"ttft_ms", "total_ms", "tokens"}],
        "token_latency_ms": {"p50": …, "p90": …, "p99": …, "max": …} | null}

`__TAG__` becomes each request's own number (the token server keys its send times by
it); with `timings_port`, send times are fetched afterwards and every token's delay is
arrival − send, skipping the first `content_offset` tokens (header tokens that make no
client event, e.g. harmony's `<|channel|>final<|message|>`). With `window_s`, the latency
is `{"all", "first", "last"}`: also over the tokens sent in the first and last `window_s`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from array import array
from typing import Any

import orjson

CHUNKED_END = b"\r\n0\r\n\r\n"


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes,
                   marker: bytes, words: bool) -> tuple[int, int, array]:
    """One streamed request: (start ns, first-token ns, arrival ns of every token)."""
    arrivals = array("q")
    tail_size = len(marker) - 1  # a marker split across reads is counted once, whole
    start = time.monotonic_ns()
    writer.write(head + b"%d\r\n\r\n" % len(body) + body)
    headers = await reader.readuntil(b"\r\n\r\n")
    if not headers.startswith(b"HTTP/1.1 200"):
        rest = await reader.read(4096)
        raise RuntimeError(f"request failed: {(headers + rest)[:600]!r}")
    tail = b""
    while True:
        data = await reader.read(262144)
        if not data:
            raise RuntimeError("the server closed the connection mid-response")
        now = time.monotonic_ns()
        window = tail + data
        if words:  # whole SSE events only: `tail` keeps the unfinished one
            events = window.split(b"\n\n")
            tail = events.pop()
            count = sum(_words(event) for event in events if marker in event)
        else:
            count = window.count(marker)
            tail = window[-tail_size:]
        if count:
            arrivals.extend([now] * count)
        if window.endswith(CHUNKED_END):
            break
    first = arrivals[0] if arrivals else time.monotonic_ns()
    return start, first, arrivals


def _words(event: bytes) -> int:
    """Tokens in a delta event: the spaces of its text (one a word, one token a word)."""
    return orjson.loads(event[event.index(b"data: ") + 6 :])["delta"].count(" ")


async def _stream(config: dict[str, Any], index: int, results: list, arrivals: dict[int, array]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", config["port"], limit=1 << 20)
    head = (b"POST " + config["path"].encode() + b" HTTP/1.1\r\nhost: bench\r\n"
            b"content-type: application/json\r\ncontent-length: ")
    marker = config["marker"].encode()
    assert len(marker) >= len(CHUNKED_END), "the marker must be longer than the chunked terminator"
    try:
        for r in range(config["requests"]):
            tag = config["tag_base"] + index * config["requests"] + r
            body = config["body"].replace("__TAG__", str(tag)).encode()
            start, first, times = await _request(reader, writer, head, body, marker,
                                                 config.get("count") == "words")
            end = times[-1] if times else time.monotonic_ns()
            results.append({"ttft_ms": (first - start) / 1e6, "total_ms": (end - start) / 1e6,
                            "tokens": len(times)})
            arrivals[tag] = times
    finally:
        writer.close()


async def _timings(port: int) -> dict[int, list[int]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /timings HTTP/1.1\r\nhost: bench\r\n\r\n")
    headers = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in headers.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    payload = orjson.loads(await reader.readexactly(length))
    writer.close()
    return {int(tag): times for tag, times in payload.items()}


def percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4)

    return {"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "min": round(ordered[0], 4),
            "max": round(ordered[-1], 4), "n": len(ordered)}


async def run(config: dict[str, Any]) -> dict[str, Any]:
    results: list[dict] = []
    arrivals: dict[int, array] = {}
    started = time.monotonic()
    await asyncio.gather(*(_stream(config, i, results, arrivals) for i in range(config["streams"])))
    wall = time.monotonic() - started
    latency = None
    if config.get("timings_port"):
        sent = await _timings(config["timings_port"])
        offset = config.get("content_offset", 0)
        delays = []
        sends = []
        for tag, times in arrivals.items():
            send = sent.get(tag, [])[offset:]
            delays.extend((arrived - at) / 1e6 for arrived, at in zip(times, send))
            sends.extend(send[:len(times)])
        latency = percentiles(delays)
        if (window := config.get("window_s")) and sends:
            latency = {"all": latency, **_windows(delays, sends, int(window * 1e9))}
    return {"wall_s": wall, "tokens": sum(r["tokens"] for r in results), "requests": results,
            "token_latency_ms": latency}


def _windows(delays: list[float], sends: list[int], window_ns: int) -> dict[str, Any]:
    """Delays of the tokens sent in the run's first and last `window_ns`: a relay that falls behind
    shows a last window worse than its first."""
    first, last = min(sends) + window_ns, max(sends) - window_ns
    return {"first": percentiles([d for d, at in zip(delays, sends) if at < first]),
            "last": percentiles([d for d, at in zip(delays, sends) if at > last])}


def main() -> None:
    config = json.loads(sys.stdin.read())
    if config.get("cpu") is not None:
        os.sched_setaffinity(0, {config["cpu"]})
    import uvloop

    sys.stdout.write(json.dumps(uvloop.run(run(config))))


if __name__ == "__main__":
    main()
