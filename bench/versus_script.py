"""A pass-through proxy in front of vLLM that makes the tiny random model "say" a scripted turn.

In a real Codex session the model's reasoning and tool call are its own generation: the
gateway keeps their exact tokens, and the next request's only new item is the call's output.
A random model never calls a tool, so bench/versus.py puts this proxy between the gateway and
vLLM: vLLM still prefills the real prompt and decodes `max_tokens` (at most `DECODE`) tokens,
and the proxy streams them on at the times vLLM sends them, but with the token ids of the
turn the session scripts (reasoning + `exec_command` call, closed by `<|im_end|>`), the rest
when vLLM finishes. So the first token arrives when vLLM's does, and the gateway sees the
turn Codex would echo back. `POST /script` sets the ids of the next generations (`[]`: pass
through unchanged); every other request goes to vLLM as it is, streamed as it comes: the
direct path goes through this proxy too, so all three pay the same extra local hop.

    python -m bench.versus_script --port 8001 --upstream http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import httpx
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

DECODE = 16  # what vLLM really decodes per scripted turn, as on the direct path


def app(upstream: str) -> Starlette:
    client = httpx.AsyncClient(base_url=upstream, timeout=600)
    script: list[int] = []

    async def set_script(request: Request) -> Response:
        script[:] = orjson.loads(await request.body())["ids"]
        return Response(status_code=204)

    async def forward(request: Request) -> Response:
        body = await request.body()
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if request.method == "POST" and request.url.path == "/inference/v1/generate" and script:
            payload = orjson.loads(body)
            if payload.get("stream"):
                params = payload["sampling_params"]
                params["max_tokens"] = min(params.get("max_tokens") or DECODE, DECODE)
                return StreamingResponse(_scripted(client, path, payload, list(script)),
                                         media_type="text/event-stream")
        headers = {"content-type": request.headers.get("content-type", "application/json")}
        answer = await client.send(client.build_request(request.method, path, content=body, headers=headers),
                                   stream=True)
        return StreamingResponse(answer.aiter_raw(), answer.status_code,
                                 media_type=answer.headers.get("content-type"), background=BackgroundTask(answer.aclose))

    routes = [Route("/script", set_script, methods=["POST"]),
              Route("/{path:path}", forward, methods=["GET", "POST"])]
    return Starlette(routes=routes)


async def _scripted(client: httpx.AsyncClient, path: str, payload: dict, script: list[int]) -> AsyncIterator[bytes]:
    """vLLM's chunks, each carrying as many of the script's ids as vLLM's carried; the last
    one carries the rest and ends with the script's last id as the stop token."""
    sent = 0
    async with client.stream("POST", path, content=orjson.dumps(payload),
                             headers={"content-type": "application/json"}) as answer:
        async for line in answer.aiter_lines():
            if not line.startswith("data: {"):
                yield (line + "\n").encode()
                continue
            chunk = orjson.loads(line[6:])
            for choice in chunk.get("choices") or ():
                if choice.get("finish_reason") is None:
                    count = min(len(choice["token_ids"]), len(script) - 1 - sent)
                    choice["token_ids"] = script[sent:sent + count]
                    sent += count
                else:
                    choice.update(token_ids=script[sent:], finish_reason="stop", stop_reason=script[-1])
                    sent = len(script)
                choice["logprobs"] = None
            yield b"data: " + orjson.dumps(chunk) + b"\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.versus_script", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    uvicorn.run(app(args.upstream.rstrip("/")), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
