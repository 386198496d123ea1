"""Measurement 3: streaming relay throughput and per-token added latency, one gateway core.

One gateway process, pinned to its own core, relays a token server's chunks (upstream
chunk → parsed → Responses SSE event) to N concurrent streams. References from the same
run: the load generator reading the token server directly (what the client side can
take, so the load generator is shown not to be the limit).

- throughput: the token server emits as fast as the sockets take it; tokens/s relayed,
  and tokens per gateway CPU-second (the core's capacity even when others share it).
- per-token latency: the token server steps like an engine, one token to every stream
  each STEP_MS (256 streams → 20,000 tokens/s); a token's delay is client arrival −
  token server send, through the gateway and direct.
"""

from __future__ import annotations

import json
import time
from functools import partial
from typing import Any

from bench import procs
from bench.models import MODELS, BenchModel
from gateway.upstream.protocol import request_body

STEP_MS = 12.8  # an engine step: 256 streams × 1000/12.8 = 20,000 tokens/s
GATEWAY_MARKER = "_text.delta\n"  # `event: response.output_text.delta` (or reasoning_text)
DIRECT_MARKER = '"token_ids":['


def _bodies(model: BenchModel) -> tuple[str, str]:
    """(gateway /v1/responses body, direct /inference/v1/generate body) with `__TAG__` as max tokens."""
    gateway = {"model": model.name, "input": "Write about a fox.", "stream": True, "store": False,
               "max_output_tokens": 0}
    prompt = list(range(1000, 1020))  # the token server ignores the prompt
    direct = request_body("generate", model=model.name, prompt_ids=prompt, sampling={"max_tokens": 0},
                          request_id="bench", stream=True)
    return (json.dumps(gateway).replace('"max_output_tokens": 0', '"max_output_tokens": __TAG__'),
            json.dumps(direct).replace('"max_tokens": 0', '"max_tokens": __TAG__'))


def _config(port: int, path: str, body: str, marker: str, count: str, streams: int, requests: int,
            tag_base: int, timings_port: int | None = None, content_offset: int = 0) -> dict[str, Any]:
    return {"port": port, "path": path, "body": body, "marker": marker, "count": count, "streams": streams,
            "requests": requests, "tag_base": tag_base, "timings_port": timings_port,
            "content_offset": content_offset}


def _pace(server: procs.Process, step_ms: float) -> None:
    import httpx

    httpx.get(f"{server.url}/pace/{step_ms}").raise_for_status()


def run(*, quick: bool, formats: tuple[str, ...] = ("qwen", "harmony"), concurrency: tuple[int, ...] = (1, 64, 256),
        tokens: int | None = None) -> list[dict[str, Any]]:
    tokens = tokens or (100 if quick else 1000)
    rows = []
    for name in formats:
        model = MODELS[name]()
        output = model.output(tokens)
        gateway_body, direct_body = _bodies(model)
        with procs.token_server(model.name, output) as upstream, \
                procs.gateway(upstream.url, str(model.model_dir), model.chat_format,
                              extra=["--max-websocket-connections", "10"]) as gateway:
            offset = len(model.header)
            # The gateway relays the tokens it reads at once as one delta: count their words.
            gw = partial(_config, gateway.port, "/v1/responses", gateway_body, GATEWAY_MARKER, "words")
            direct = partial(_config, upstream.port, "/inference/v1/generate", direct_body, DIRECT_MARKER, "events")
            # Warm-up: code paths, and as many pooled upstream connections as streams will run
            # (a tag below the output's length is a short max_tokens: tags 10..N+9 answer that many tokens).
            procs.load(gw(max(concurrency), 1, 10))
            for streams in concurrency:
                requests = 1 if quick or streams > 1 else 5
                tag = 1_000_000 * streams  # distinct max_output_tokens per request, below max_model_len
                _pace(upstream, 0)
                reference = procs.load(direct(streams, requests, tag))
                cpu_before = gateway.cpu_seconds()
                relayed = procs.load(gw(streams, requests, tag + 500_000))
                cpu = gateway.cpu_seconds() - cpu_before
                _pace(upstream, STEP_MS)
                paced_direct = procs.load(direct(streams, 1, tag + 100_000, timings_port=upstream.port))
                cpu_before = gateway.cpu_seconds()
                paced = procs.load(gw(streams, 1, tag + 200_000, timings_port=upstream.port,
                                      content_offset=offset))
                paced["cpu_s"] = gateway.cpu_seconds() - cpu_before
                expected = streams * requests * tokens
                if relayed["tokens"] != expected:
                    raise RuntimeError(f"{name}: the gateway relayed {relayed['tokens']} of {expected} tokens")
                rows.append(_row(name, streams, tokens, requests, reference, relayed, cpu, paced_direct, paced))
    return rows


def steady(*, seconds: float = 60.0, streams: int = 256, fmt: str = "qwen", window_s: float = 10.0) -> dict:
    """`streams` engine-paced streams for `seconds` (256 × 1000/12.8 ms = 20,000 tokens/s offered):
    how much is relayed, the gateway's CPU per token, and the added delay over the whole run and
    over its first and last `window_s` (steady, or falling behind?). Direct first, the reference."""
    model = MODELS[fmt]()
    tokens = int(seconds * 1000 / STEP_MS)
    gateway_body, direct_body = _bodies(model)
    with procs.token_server(model.name, model.output(tokens), step_ms=STEP_MS) as upstream, \
            procs.gateway(upstream.url, str(model.model_dir), model.chat_format) as gateway:
        gw = partial(_config, gateway.port, "/v1/responses", gateway_body, GATEWAY_MARKER, "words")
        direct = partial(_config, upstream.port, "/inference/v1/generate", direct_body, DIRECT_MARKER, "events")
        _pace(upstream, 0)
        procs.load(gw(streams, 1, 10))  # warm-up: code paths and pooled connections
        _pace(upstream, STEP_MS)
        reference = procs.load({**direct(streams, 1, 1_000_000 + tokens, timings_port=upstream.port),
                                "window_s": window_s})
        user_before, sys_before = gateway.cpu_times()
        paced = procs.load({**gw(streams, 1, 2_000_000 + tokens, timings_port=upstream.port,
                                 content_offset=len(model.header)), "window_s": window_s})
        user_after, sys_after = gateway.cpu_times()
        user, system = user_after - user_before, sys_after - sys_before
        cpu = user + system
    offered = streams * 1000 / STEP_MS
    gw_latency, direct_latency = paced["token_latency_ms"], reference["token_latency_ms"]
    return {
        "format": fmt, "streams": streams, "seconds": seconds, "offered_tokens_per_s": round(offered),
        "direct_tokens_per_s": round(reference["tokens"] / reference["wall_s"]),
        "gateway_tokens_per_s": round(paced["tokens"] / paced["wall_s"]),
        "relayed_fraction": round(paced["tokens"] / paced["wall_s"] / offered, 4),
        "gateway_cpu_s": round(cpu, 2), "gateway_cpu_us_per_token": round(cpu / paced["tokens"] * 1e6, 1),
        # the gateway's own work, and the kernel's (one read and one write per token per stream)
        "gateway_user_us_per_token": round(user / paced["tokens"] * 1e6, 1),
        "gateway_sys_us_per_token": round(system / paced["tokens"] * 1e6, 1),
        **{f"added_{window}_{key}_ms": _diff(gw_latency[window], direct_latency[window], key)
           for window in ("all", "first", "last") for key in ("p50", "p99")},
        "direct_token_latency_ms": direct_latency, "gateway_token_latency_ms": gw_latency,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def _row(name: str, streams: int, tokens: int, requests: int, reference: dict, relayed: dict, cpu: float,
         paced_direct: dict, paced: dict) -> dict[str, Any]:
    direct_latency = paced_direct["token_latency_ms"] or {}
    gateway_latency = paced["token_latency_ms"] or {}
    relay_rate = relayed["tokens"] / relayed["wall_s"]
    return {
        "format": name,
        "streams": streams,
        "tokens_per_request": tokens,
        "requests_per_stream": requests,
        "direct_tokens_per_s": round(reference["tokens"] / reference["wall_s"]),
        "gateway_tokens_per_s": round(relay_rate),
        "gateway_cpu_s": round(cpu, 3),
        "gateway_tokens_per_cpu_s": round(relayed["tokens"] / cpu) if cpu > 0 else None,
        "paced_tokens_per_s": round(paced["tokens"] / paced["wall_s"]),
        "paced_cpu_us_per_token": round(paced["cpu_s"] / paced["tokens"] * 1e6, 1),
        "direct_token_latency_ms": direct_latency,
        "gateway_token_latency_ms": gateway_latency,
        "added_token_latency_p50_ms": _diff(gateway_latency, direct_latency, "p50"),
        "added_token_latency_p99_ms": _diff(gateway_latency, direct_latency, "p99"),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def _diff(a: dict, b: dict, key: str) -> float | None:
    return round(a[key] - b[key], 4) if key in a and key in b else None
