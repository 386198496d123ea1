"""Measurement 4: the gateway's resident memory per idle WebSocket and per cached session.

Both are RSS growth of a gateway process (after a warm-up that allocates what every
request needs anyway) divided by the count, next to the size of the data itself.

- idle WebSockets: N connections to /v1/responses that send nothing, with and without
  permessage-deflate offered by the client (each deflate context holds zlib windows).
- cached sessions: N HTTP requests with a ~100k-token Codex-shaped history under distinct
  `prompt_cache_key`s; each leaves one TokenState (the exact token ids, int32) in the store.
  RSS growth is blurred by heap the warm-up freed, so the retained size is also counted
  object by object on the same TokenState built in this process.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import httpx
import websockets

from bench import procs
from bench.models import qwen
from bench.workload import SHELL_TOOL, history

SESSION_TOKENS = 100_000


async def _open_sockets(url: str, count: int, compression: str | None) -> list:
    sockets = []
    for start in range(0, count, 100):  # in batches: a burst of 1,000 handshakes overflows nothing
        batch = [websockets.connect(url, compression=compression, max_size=None, open_timeout=60)
                 for _ in range(start, min(count, start + 100))]
        sockets += await asyncio.gather(*batch)
    return sockets


def _settled_rss(process: procs.Process) -> int:
    time.sleep(0.5)  # let the last handshakes finish server-side
    return process.rss_bytes()


def websockets_rss(gateway: procs.Process, count: int) -> list[dict[str, Any]]:
    url = gateway.url.replace("http://", "ws://") + "/v1/responses"

    async def measure(compression: str | None) -> dict[str, Any]:
        warm = await _open_sockets(url, 10, compression)
        await asyncio.gather(*(ws.close() for ws in warm))
        before = _settled_rss(gateway)
        sockets = await _open_sockets(url, count, compression)
        after = _settled_rss(gateway)
        alive = sum(1 for ws in sockets if ws.state.name == "OPEN")
        await asyncio.gather(*(ws.close() for ws in sockets))
        return {"client_compression": compression or "none", "connections": count, "open": alive,
                "rss_before_mb": round(before / 2**20, 1), "rss_after_mb": round(after / 2**20, 1),
                "total_mb": round((after - before) / 2**20, 2),
                "per_connection_kb": round((after - before) / count / 1024, 1)}

    return [asyncio.run(measure(compression)) for compression in (None, "deflate")]


def sessions_rss(gateway: procs.Process, count: int, tokens: int) -> dict[str, Any]:
    model = qwen()
    items = history(tokens)
    with httpx.Client(base_url=gateway.url, timeout=120) as client:

        def turn(key: str) -> int:
            body = {"model": model.name, "input": items, "tools": [SHELL_TOOL], "store": False,
                    "prompt_cache_key": key, "max_output_tokens": 16}
            response = client.post("/v1/responses", json=body)
            response.raise_for_status()
            return response.json()["usage"]["input_tokens"]

        for warm in range(2):  # the same size of request on other keys: the transient peak is paid
            turn(f"warm-{warm}")
        before = gateway.rss_bytes()
        prompt_tokens = [turn(f"session-{i}") for i in range(count)]
        after = gateway.rss_bytes()
    retained = _retained_bytes(items, model.output(4))
    return {"sessions": count, "prompt_tokens": prompt_tokens[0], "rss_before_mb": round(before / 2**20, 1),
            "rss_after_mb": round(after / 2**20, 1),
            "rss_per_session_kb": round((after - before) / count / 1024, 1),
            "retained_per_session_kb": round(retained / 1024, 1)}


def _retained_bytes(items: list[dict], output: list[int]) -> int:
    """What one session keeps: the TokenState the gateway stores for this history, counted."""
    from gateway.adapters.responses.input import parse_request
    from gateway.core.conversation import Message
    from gateway.formats import load_format
    from gateway.tokenfix.state import TokenState

    model = qwen()
    conversation = parse_request({"model": model.name, "input": items, "tools": [SHELL_TOOL]}).conversation
    prompt = load_format(str(model.model_dir), chat_format="hf").render(conversation)
    state = TokenState.build(conversation, [*conversation.items, Message(role="assistant", text="")], prompt,
                             output)
    return (sys.getsizeof(state) + sys.getsizeof(state.tokens) + sys.getsizeof(state.context)
            + sys.getsizeof(state.digest))


def run(*, quick: bool, sockets: int = 1000, sessions: int | None = None,
        session_tokens: int = SESSION_TOKENS) -> dict[str, Any]:
    model = qwen()
    with procs.token_server(model.name, model.output(4)) as upstream, \
            procs.gateway(upstream.url, str(model.model_dir), model.chat_format,
                          extra=["--max-websocket-connections", str(sockets + 10)]) as gateway:
        return {"websockets": websockets_rss(gateway, sockets),
                "sessions": sessions_rss(gateway, sessions or (5 if quick else 20), session_tokens)}
