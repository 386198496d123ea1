"""`python -m bench.workers [ROUNDS [STREAMS...]]`: relay throughput with `--workers 1` and `--workers 2`.

The same token server (unpaced: it emits as fast as the sockets take) and load generator as
bench/relay.py, against a gateway of one and of two processes (the second shares state through
the private redis-server `--workers` starts), at 64 and 256 concurrent streams, rounds
interleaved (1, 2, 1, 2, …) so a machine whose load drifts hurts both alike. Next to each row:
the load generator reading the token server directly in the same round (what the client side
and the token server can do at all). No process is pinned: the workers and the kernel's
SO_REUSEPORT spread are what is measured. Writes `bench/results/workers.json`.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from bench import procs
from bench.models import MODELS
from bench.relay import DIRECT_MARKER, GATEWAY_MARKER, _bodies, _config

TOKENS = 1000
STREAMS = (64, 256)
OUT = Path(__file__).parent / "results" / "workers.json"


def run(rounds: int = 3, streams_list: tuple[int, ...] = STREAMS) -> dict[str, Any]:
    model = MODELS["qwen"]()
    gateway_body, direct_body = _bodies(model)
    rates: dict[str, list[float]] = {}
    with procs.token_server(model.name, model.output(TOKENS), cpu=None) as upstream:
        direct = partial(_config, upstream.port, "/inference/v1/generate", direct_body, DIRECT_MARKER, "events")
        for index in range(rounds):
            for workers in (1, 2):
                with procs.gateway(upstream.url, str(model.model_dir), model.chat_format, cpu=None,
                                   extra=["--workers", str(workers), "--max-websocket-connections", "10"]) as gateway:
                    gw = partial(_config, gateway.port, "/v1/responses", gateway_body, GATEWAY_MARKER, "words")
                    procs.load(gw(max(streams_list), 1, 10), cpu=None)  # warm-up: code paths, pooled connections
                    for streams in streams_list:
                        tag = 1_000_000 * streams + 10_000 * index + 1000 * workers
                        reference = procs.load(direct(streams, 1, tag), cpu=None)
                        relayed = procs.load(gw(streams, 1, tag + 500_000), cpu=None)
                        if relayed["tokens"] != streams * TOKENS:
                            raise RuntimeError(f"relayed {relayed['tokens']} of {streams * TOKENS} tokens")
                        rates.setdefault(f"direct_{streams}", []).append(reference["tokens"] / reference["wall_s"])
                        rates.setdefault(f"workers{workers}_{streams}", []).append(
                            relayed["tokens"] / relayed["wall_s"])
    return {"machine": {"cores": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 1)},
            "tokens_per_request": TOKENS, "rounds": rounds, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "tokens_per_s": {name: {"median": round(statistics.median(values)), "min": round(min(values)),
                                    "max": round(max(values))} for name, values in rates.items()}}


def main() -> None:
    result = run(int(sys.argv[1]) if len(sys.argv) > 1 else 3, tuple(map(int, sys.argv[2:])) or STREAMS)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    sys.stdout.write(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
