"""A scripted stand-in for stock vLLM's token endpoints, served over real HTTP.

Tests queue the outputs (`Script`s) the next requests get, then assert on the exact
bodies the gateway sent (`requests`), on aborts and on client disconnects. Response
shapes are copies of vLLM 0.32's (captured from the real server; tests/support/
vllm_shapes.md, and tests/ops/test_fixtures_models.py compares the two live).

    with FakeVLLM() as fake:
        fake.queue(Script([9707, 1879, 151645], finish_reason="stop", stop_reason=151645))
        ... point the gateway at fake.url ...
        assert fake.requests[-1].body["token_ids"] == [...]

The pool's probe and warmup requests (prompt `[0]`, `max_tokens` 1, not streamed) are
answered with one token without taking a queued script, and recorded in `probes`, not in
`requests`: tests queue and assert on model calls only. Other requests with nothing
queued get `DEFAULT_SCRIPT` (one token).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Self

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.threaded_server import serve_in_thread

SYSTEM_FINGERPRINT = "vllm-0.32.0-fake"


@dataclass
class Script:
    """What the next request gets.

    `token_ids` include the stop token, as vLLM's do. `chunks` gives the number of tokens
    per streamed event (default one each). `error_after` sends vLLM's in-stream error
    event after that many chunks; `status` != 200 answers with vLLM's error body instead.
    `hang` keeps the stream open after the last scripted chunk until the client leaves.
    `drop_after` cuts the connection after that many chunks, as a replica that died would.
    `header_delay` waits that long before answering at all (a replica stalled before its headers);
    `headers_until` then holds the answer until the test sets the event;
    `stall_after` stops sending after that many chunks until the client leaves (stalled mid-stream),
    or with `stall_until` until the test sets that event (a generation the test cuts at a known token);
    `malformed_after` sends a payload that is not JSON after that many chunks.
    """

    token_ids: list[int]
    finish_reason: str = "stop"
    stop_reason: int | str | None = None
    logprobs: list[float] | None = None
    top_logprobs: list[list[tuple[int, float]]] | None = None
    chunks: list[int] | None = None
    delay: float = 0.0
    error_after: int | None = None
    error_message: str = "scripted failure"
    status: int = 200
    hang: bool = False
    drop_after: int | None = None
    cached_tokens: int | None = None
    header_delay: float = 0.0
    headers_until: threading.Event | None = None
    stall_after: int | None = None
    stall_until: threading.Event | None = None
    malformed_after: int | None = None
    routed_experts: str | None = None  # generate's final choice: vLLM's base64 `.npy` of the routing rows


DEFAULT_SCRIPT = Script([0], finish_reason="length")
# A kv_producer's answer to a prefill leg (vLLM 0.32's NixlConnector, captured from the real one).
TRANSFER_PARAMS = {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [[1, 2]],
                   "remote_engine_id": "fake-engine-0", "remote_request_id": "fake", "remote_host": "127.0.0.1",
                   "remote_port": 5601, "tp_size": 1, "remote_prefill_cached_tokens": 0}


@dataclass
class Recorded:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class FakeVLLM:
    model: str = "tiny-qwen3"
    max_model_len: int = 32768
    enable_scale_out: bool = True  # False: /inference/* answers 403 like a stock replica without the flag
    image_tokens: int = 1  # what each `content_parts` image expands to in the prompt vLLM counts
    # Set: with `return_token_ids`, generate reports its prompt with each of these placeholders repeated
    # `image_tokens` times and their `mm_placeholders` (vLLM does, on the first event when streamed).
    image_token_id: int | None = None
    healthy: bool = True
    health_checks: int = 0  # /health requests answered
    requests: list[Recorded] = field(default_factory=list)  # model calls (and aborts), not probes
    probes: list[Recorded] = field(default_factory=list)  # the pool's probe and warmup requests
    aborted: list[str] = field(default_factory=list)  # request ids sent to /inference/v1/abort_requests
    # A non-streamed request asking for `do_remote_decode` (a prefill leg) is answered these as its
    # kv_transfer_params, as a kv_producer replica does (NixlConnector); None: none, as a plain replica.
    transfer_params: dict[str, Any] | None = field(default_factory=lambda: dict(TRANSFER_PARAMS))
    disconnected: list[str] = field(default_factory=list)  # request ids whose client left mid-stream
    completed: list[str] = field(default_factory=list)  # request ids whose stream reached [DONE]
    _scripts: deque[Script] = field(default_factory=deque)
    url: str = ""
    weight_version: str = "default"  # the label of its weights: its generations' `weight_versions` spans

    def queue(self, *scripts: Script) -> None:
        self._scripts.extend(scripts)

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [r.body for r in self.requests if r.path == path]

    def reset(self) -> None:
        """Forget what earlier tests queued and saw (for a server shared by a module)."""
        self._scripts.clear()
        for seen in (self.requests, self.probes, self.aborted, self.disconnected, self.completed):
            seen.clear()

    # --- serving -------------------------------------------------------------------------

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/health", self._health),
            Route("/v1/models", self._models),
            Route("/version", lambda request: JSONResponse({"version": "0.32.0"})),
            Route("/inference/v1/generate", self._generate, methods=["POST"]),
            Route("/inference/v1/abort_requests", self._abort, methods=["POST"]),
            Route("/v1/completions", self._completions, methods=["POST"]),
            Route("/tokenize", self._tokenize, methods=["POST"]),
        ])

    def __enter__(self) -> Self:
        self._serving = serve_in_thread(self.app(), "the fake vLLM server")
        self.url = f"http://127.0.0.1:{self._serving.__enter__()}"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._serving.__exit__(None, None, None)

    async def _health(self, request: Request) -> Response:
        self.health_checks += 1
        return Response(status_code=200 if self.healthy else 503)

    async def _models(self, request: Request) -> Response:
        created = int(time.time())
        return JSONResponse({"object": "list", "data": [{
            "id": self.model, "object": "model", "created": created, "owned_by": "vllm",
            "root": f"/models/{self.model}", "parent": None, "max_model_len": self.max_model_len,
            "permission": [{
                "id": f"modelperm-{secrets.token_hex(8)}", "object": "model_permission", "created": created,
                "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                "organization": "*", "group": None, "is_blocking": False,
            }],
        }]})

    async def _record(self, request: Request) -> dict[str, Any]:
        body = await request.json()
        recorded = Recorded(request.url.path, body, dict(request.headers))
        (self.probes if _is_probe(body) else self.requests).append(recorded)
        return body

    async def _abort(self, request: Request) -> Response:
        if not self.enable_scale_out:
            return _scale_out_disabled()
        body = await self._record(request)
        self.aborted.extend(body.get("request_ids") or [])
        return Response(status_code=200)

    async def _generate(self, request: Request) -> Response:
        if not self.enable_scale_out:
            return _scale_out_disabled()
        body = await self._record(request)
        if (error := self._model_error(body)) is not None:
            return error
        script = self._next_script(body)
        await _hold_headers(script)
        if script.status != 200:
            return _error_response(script.error_message, script.status)
        request_id = "generate-tokens-" + (body.get("request_id") or secrets.token_hex(8))
        params = body.get("sampling_params") or {}
        expanded = len(body.get("token_ids") or []) + len(body.get("content_parts") or []) * (self.image_tokens - 1)
        output = _Output(script, expanded, params.get("logprobs"), self.weight_version)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = self._generate_events(request_id, output, include_usage, self._expansion(body))
            return StreamingResponse(self._sse(request_id, script, events), media_type="text/event-stream")
        return JSONResponse({
            "request_id": request_id, "model": body.get("model"), "created": int(time.time()),
            "usage": output.usage(details=True), "prompt_logprobs": None, "prompt_token_id_logprobs": None,
            "prompt_token_ids": None, "mm_placeholders": None, "metrics": None, **self._expansion(body),
            "kv_transfer_params": self._transfer(body),
            "ec_transfer_params": None, "output_mode": "tokens",
            "choices": [output.generate_choice(0, len(script.token_ids), final=True)],
        })

    async def _completions(self, request: Request) -> Response:
        body = await self._record(request)
        if (error := self._model_error(body)) is not None:
            return error
        prompt = body.get("prompt")
        if not (isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)):
            return _error_response("the fake vLLM only takes integer prompts", 400)
        script = self._next_script(body)
        await _hold_headers(script)
        if script.status != 200:
            return _error_response(script.error_message, script.status)
        request_id = "cmpl-" + (body.get("request_id") or secrets.token_hex(8))
        output = _Output(script, len(prompt), body.get("logprobs"), self.weight_version)
        with_ids = bool(body.get("return_token_ids"))
        created = int(time.time())
        head = {"id": request_id, "object": "text_completion", "created": created, "model": body.get("model")}
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = self._completion_events(head, output, prompt if with_ids else None, include_usage)
            return StreamingResponse(self._sse(request_id, script, events), media_type="text/event-stream")
        choice = output.completion_choice(0, len(script.token_ids), final=True)
        choice.update(token_ids=script.token_ids if with_ids else None, prompt_logprobs=None,
                      prompt_token_ids=prompt if with_ids else None, routed_experts=None)
        return JSONResponse({
            **head, "choices": [choice], "service_tier": None, "system_fingerprint": SYSTEM_FINGERPRINT,
            "usage": output.usage(details=True), "kv_transfer_params": self._transfer(body), "ec_transfer_params": None,
            "metrics": None,
        })

    async def _tokenize(self, request: Request) -> Response:
        """vLLM's text /tokenize; the fake has no tokenizer: one id per character (its code point)."""
        body = await self._record(request)
        tokens = [ord(char) for char in body.get("prompt") or ""]
        answer: dict[str, Any] = {"count": len(tokens), "max_model_len": self.max_model_len, "tokens": tokens,
                                  "token_strs": list(body["prompt"]) if body.get("return_token_strs") else None}
        return JSONResponse(answer)

    def _transfer(self, body: dict[str, Any]) -> dict[str, Any] | None:
        asked = body.get("kv_transfer_params") or {}
        return self.transfer_params if asked.get("do_remote_decode") else None

    def _next_script(self, body: dict[str, Any]) -> Script:
        if _is_probe(body) or not self._scripts:
            return DEFAULT_SCRIPT
        return self._scripts.popleft()

    def _model_error(self, body: dict[str, Any]) -> Response | None:
        if body.get("model") in (None, "", self.model):
            return None
        message = f"The model `{body.get('model')}` does not exist. Valid aliases: {self.model}."
        return JSONResponse({"error": {"message": message, "type": "NotFoundError", "param": "model",
                                       "code": 404}}, status_code=404)

    # --- streaming -----------------------------------------------------------------------

    def _expansion(self, body: dict[str, Any]) -> dict[str, Any]:
        """generate's `prompt_token_ids` and `mm_placeholders` when asked for and configured ({} else)."""
        if not body.get("return_token_ids") or self.image_token_id is None:
            return {}
        prompt: list[int] = []
        ranges = []
        for token in body.get("token_ids") or []:
            if token == self.image_token_id:
                ranges.append({"offset": len(prompt), "length": self.image_tokens})
                prompt += [token] * self.image_tokens
            else:
                prompt.append(token)
        return {"prompt_token_ids": prompt, "mm_placeholders": {"image": ranges} if ranges else None}

    def _generate_events(self, request_id: str, output: _Output, include_usage: bool,
                         expansion: dict[str, Any]) -> Iterator[dict]:
        for start, end, final in output.spans():
            yield {"request_id": request_id, "usage": None, "output_mode": "tokens",
                   "choices": [output.generate_choice(start, end, final=final)], **(expansion if start == 0 else {})}
        if include_usage:
            yield {"request_id": request_id, "usage": output.usage(details=False), "output_mode": "tokens",
                   "choices": []}

    def _completion_events(self, head: dict, output: _Output, prompt: list[int] | None,
                           include_usage: bool) -> Iterator[dict]:
        for start, end, final in output.spans():
            choice = output.completion_choice(start, end, final=final)
            # vLLM sends token_ids only when asked, and the prompt's ids only in the first chunk.
            choice.update(prompt_token_ids=prompt if start == 0 else None,
                          token_ids=output.script.token_ids[start:end] if prompt is not None else None)
            event = {**head, "choices": [choice]}
            if final and not include_usage:
                event["system_fingerprint"] = SYSTEM_FINGERPRINT
            yield event
        if include_usage:
            yield {**head, "choices": [], "usage": output.usage(details=False),
                   "system_fingerprint": SYSTEM_FINGERPRINT}

    async def _sse(self, request_id: str, script: Script, events: Iterator[dict]) -> AsyncIterator[bytes]:
        finished = False
        try:
            for index, event in enumerate(events):
                if script.error_after is not None and index == script.error_after:
                    # vLLM formats this one event with json.dumps' default separators.
                    error = {"message": script.error_message, "type": "InternalServerError", "param": None,
                             "code": 500}
                    yield f"data: {json.dumps({'error': error})}\n\n".encode()
                    break
                if index == script.drop_after:
                    raise ConnectionDropped  # uvicorn closes the socket mid-body
                if index == script.malformed_after:
                    yield b"data: {not json\n\n"
                if index == script.stall_after and script.stall_until is not None:
                    await asyncio.to_thread(script.stall_until.wait, 60)
                elif index == script.stall_after:
                    await asyncio.Event().wait()  # until the client disconnects and Starlette cancels us
                if index and script.delay:
                    await asyncio.sleep(script.delay)
                yield b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"
            if script.hang:
                await asyncio.Event().wait()  # until the client disconnects and Starlette cancels us
            yield b"data: [DONE]\n\n"
            finished = True
            self.completed.append(request_id)
        finally:
            if not finished:
                self.disconnected.append(request_id)


class ConnectionDropped(Exception):
    pass


class _Output:
    """One scripted generation, sliced into vLLM-shaped choices."""

    def __init__(self, script: Script, prompt_tokens: int, logprobs: int | None, version: str = "default") -> None:
        self.script = script
        self.version = version
        self.prompt_tokens = prompt_tokens
        self.num_logprobs = logprobs

    def spans(self) -> Iterator[tuple[int, int, bool]]:
        total = len(self.script.token_ids)
        sizes = self.script.chunks or [1] * total
        if sum(sizes) != total:
            raise ValueError(f"chunks {sizes} do not add up to {total} tokens")
        start = 0
        for size in sizes:
            yield start, start + size, start + size == total
            start += size

    def usage(self, *, details: bool) -> dict[str, Any]:
        completion = len(self.script.token_ids)
        usage: dict[str, Any] = {"prompt_tokens": self.prompt_tokens,
                                 "total_tokens": self.prompt_tokens + completion, "completion_tokens": completion}
        if self.script.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.script.cached_tokens}
        elif details:
            usage["prompt_tokens_details"] = None
        if details:
            usage["completion_tokens_details"] = None
        return usage

    def _token_logprobs(self, start: int, end: int) -> list[tuple[int, float, list[tuple[int, float]]]]:
        """(token id, logprob, top alternatives) per token; synthesised unless scripted."""
        result = []
        for i in range(start, end):
            token = self.script.token_ids[i]
            logprob = self.script.logprobs[i] if self.script.logprobs else -1.0
            if self.script.top_logprobs:
                top = self.script.top_logprobs[i]
            else:
                top = [(token, logprob)] + [(token + j, logprob - j) for j in range(1, self.num_logprobs or 0)]
                top = top[: self.num_logprobs]
            result.append((token, logprob, top))
        return result

    def generate_choice(self, start: int, end: int, *, final: bool) -> dict[str, Any]:
        logprobs = None
        if self.num_logprobs is not None:
            logprobs = {"content": [
                {"token_id": token, "logprob": logprob, "rank": _rank(token, logprob, top),
                 "top_logprobs": [{"token_id": t, "logprob": lp, "rank": rank}
                                  for rank, (t, lp) in enumerate(top, start=1)]}
                for token, logprob, top in self._token_logprobs(start, end)
            ]}
        total = len(self.script.token_ids)
        return {
            "index": 0,
            "finish_reason": self.script.finish_reason if final else None,
            "stop_reason": self.script.stop_reason if final else None,
            "token_ids": self.script.token_ids[start:end],
            "routed_experts": self.script.routed_experts if final else None,
            "sampling_mask": None,
            "weight_versions": [{"version": self.version, "start": 0, "end": total}] if final else None,
            "logprobs": logprobs,
        }

    def completion_choice(self, start: int, end: int, *, final: bool) -> dict[str, Any]:
        logprobs = None
        if self.num_logprobs is not None:
            entries = self._token_logprobs(start, end)
            logprobs = {
                "text_offset": [0] * len(entries),  # the fake has no detokenizer
                "token_logprobs": [logprob for _, logprob, _ in entries],
                "tokens": [f"token_id:{token}" for token, _, _ in entries],
                "top_logprobs": [{f"token_id:{t}": lp for t, lp in top} for _, _, top in entries],
            }
        return {
            "index": 0,
            "text": "",
            "logprobs": logprobs,
            "finish_reason": self.script.finish_reason if final else None,
            "stop_reason": self.script.stop_reason if final else None,
        }


def _is_probe(body: dict[str, Any]) -> bool:
    """The shape of the gateway's probe and warmup requests (gateway/upstream/health.py)."""
    prompt = body.get("token_ids", body.get("prompt"))
    max_tokens = (body.get("sampling_params") or body).get("max_tokens")
    return prompt == [0] and max_tokens == 1 and not body.get("stream")


def _rank(token: int, logprob: float, top: list[tuple[int, float]]) -> int:
    return next((i for i, (t, _) in enumerate(top, start=1) if t == token), len(top) + 1)


def _error_response(message: str, status: int) -> JSONResponse:
    kinds = {400: "BadRequestError", 403: "PermissionDeniedError", 404: "NotFoundError",
             429: "TooManyRequestsError", 503: "ServiceUnavailableError"}
    error = {"message": message, "type": kinds.get(status, "InternalServerError"), "param": None, "code": status}
    return JSONResponse({"error": error}, status_code=status)


async def _hold_headers(script: Script) -> None:
    await asyncio.sleep(script.header_delay)
    while script.headers_until is not None and not script.headers_until.is_set():
        await asyncio.sleep(0.01)


def _scale_out_disabled() -> JSONResponse:
    return _error_response(
        "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them.", 403)
