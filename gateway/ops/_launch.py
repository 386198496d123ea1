"""`vllm-gateway launch`: start local stock vLLM replicas, supervise them, serve the gateway in front.

A few gateway-style flags map to vLLM's (VLLM_FLAGS); every flag the gateway does not know
goes to vLLM unchanged, so any `vllm serve` option works:

    vllm-gateway launch --model-path Qwen/Qwen3-8B --replicas 2 --gpus-per-replica 1 \\
        --context-length 32768 --enable-prefix-caching --port 8080

With prefix routing (the default) over several replicas, each publishes its KV-cache events
and the gateway subscribes (`kv_events`), unless vLLM's `--kv-events-config` or the gateway's
`--kv-events` is given. The events go over ZMQ `ipc://` sockets in a directory only this launch
can write: a TCP port chosen free now is bound by vLLM's engine only after the model loaded,
minutes later, and anything on the host may have taken it by then. (The replicas' HTTP ports
are bound at once by vLLM's API server; one taken anyway is chosen again, `Supervisor`.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from gateway.core.settings import Settings
from gateway.ops._flags import settings_from_args
from gateway.ops._serve import run
from gateway.ops._supervisor import Supervisor
from gateway.ops.vllm_process import VLLMError, VLLMProcess
from gateway.server.tracing import replica_options

__all__ = ["launch", "serve_supervised"]

log = logging.getLogger(__name__)

# Gateway flag (argparse dest) → vLLM flag. --model-path (alias --model) is vLLM's --model.
VLLM_FLAGS = {
    "tokenizer": "--tokenizer",
    "served_model_name": "--served-model-name",
    "context_length": "--max-model-len",
    "tp": "--tensor-parallel-size",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "dtype": "--dtype",
}


def vllm_args(args: argparse.Namespace, passthrough: Sequence[str]) -> list[str]:
    """vLLM's flags for the gateway-style ones in `args`, then `passthrough` unchanged."""
    values = vars(args) | {"tp": args.tp or (args.gpus_per_replica if args.gpus_per_replica > 1 else None)}
    mapped = []
    for dest, flag in VLLM_FLAGS.items():
        if values[dest] is not None:
            mapped += [flag, str(values[dest])]
    return mapped + list(passthrough)


def replica_env(index: int, gpus_per_replica: int) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for replica `index`: its own slice of the GPUs this process may use."""
    if gpus_per_replica <= 0:
        return {}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    first = index * gpus_per_replica
    if not visible:
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in range(first, first + gpus_per_replica))}
    devices = visible.split(",")
    if first + gpus_per_replica > len(devices):
        raise VLLMError(f"replica {index} needs GPUs {first}…{first + gpus_per_replica - 1} of "
                        f"CUDA_VISIBLE_DEVICES={visible}")
    return {"CUDA_VISIBLE_DEVICES": ",".join(devices[first:first + gpus_per_replica])}


def replicas(args: argparse.Namespace, passthrough: Sequence[str]) -> list[VLLMProcess]:
    """The replicas to start; their logs go to --vllm-log-dir, else `launch` picks a temporary
    dir once it starts them (nothing is created here)."""
    log_dir = Path(args.vllm_log_dir) if args.vllm_log_dir else None
    return [
        VLLMProcess(
            args.model_path, port=args.vllm_port + i if args.vllm_port else None, python=args.vllm_python,
            vllm_cmd=shlex.split(args.vllm_cmd or ""), served_model_name=None, max_model_len=None, dtype=None,
            enable_scale_out=args.upstream_api != "completions",  # /inference/v1/generate
            extra_args=vllm_args(args, passthrough), env=replica_env(i, args.gpus_per_replica),
            log_path=log_dir / f"vllm-{i}.log" if log_dir else None,
        )
        for i in range(args.replicas)
    ]


@dataclasses.dataclass(frozen=True)
class KVEvents:
    """Where one launched replica publishes its KV-cache events (ZMQ endpoints, live and replay)."""

    process: VLLMProcess
    endpoint: str
    replay: str

    @property
    def spec(self) -> str:
        """The gateway's `--kv-events` spec, by the replica's URL as it is now (its port may have
        moved while it started)."""
        return f"{self.process.url}={self.endpoint},{self.replay}"


def kv_events(processes: Sequence[VLLMProcess], args: argparse.Namespace, passthrough: Sequence[str],
              run_dir: Path) -> list[KVEvents]:
    """Have each replica publish its KV-cache events on two `ipc://` sockets in `run_dir` (which
    only this process may write) and return where; none for one replica, for another routing, or
    when vLLM's events or the gateway's subscriptions were configured by hand."""
    if args.routing != "prefix" or len(processes) < 2 or args.kv_events or \
            any(arg.startswith("--kv-events-config") for arg in passthrough):
        return []
    published = []
    for i, process in enumerate(processes):
        events = KVEvents(process, f"ipc://{run_dir}/kv-events-{i}", f"ipc://{run_dir}/kv-events-{i}-replay")
        config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": events.endpoint,
                  "replay_endpoint": events.replay}
        process.extra_args += ("--kv-events-config", json.dumps(config))
        published.append(events)
    return published


def launch(args: argparse.Namespace, passthrough: Sequence[str]) -> int:
    if not args.model_path:
        log.error("vllm-gateway launch: --model-path (or GATEWAY_MODEL) is required")
        return 2
    if args.replicas < 1:
        log.error("vllm-gateway launch: --replicas must be at least 1")
        return 2
    try:
        processes = replicas(args, passthrough)
    except VLLMError as exc:
        log.error("%s", exc)
        return 2
    if not args.vllm_log_dir:  # one temporary dir for this run's logs, made only now that they will be written
        log_dir = Path(tempfile.mkdtemp(prefix="vllm-gateway-"))
        for i, process in enumerate(processes):
            process.log_path = log_dir / f"vllm-{i}.log"
    settings = settings_from_args(args, model=args.model_path, upstreams=[])
    run_dir = Path(tempfile.mkdtemp(prefix="vllm-gateway-run-"))  # mode 0700: the KV-event sockets
    try:
        return serve_supervised(processes, settings, max_restarts=args.max_restarts,
                                ready_timeout=args.ready_timeout, workers=args.workers,
                                kv_events=kv_events(processes, args, passthrough, run_dir))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def serve_supervised(processes: Sequence[VLLMProcess], settings: Settings, *, max_restarts: int = 5,
                     ready_timeout: float = 1800.0, workers: int = 1, kv_events: Sequence[KVEvents] = ()) -> int:
    """Start `processes`, wait until all are healthy and warm, then serve the gateway in front of
    them (`settings.upstreams` are theirs, and `kv_events` its subscriptions to them) until
    SIGTERM/SIGINT, keeping them up meanwhile; stop them all on the way out. Returns the exit
    code: 1 if the replicas failed."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per health probe would bury the rest
    supervisor = Supervisor(processes, max_restarts=max_restarts, ready_timeout=ready_timeout,
                            on_give_up=lambda: os.kill(os.getpid(), signal.SIGTERM))
    # SIGTERM while the models load becomes SystemExit here, so the `finally` stops the replicas;
    # while the gateway serves, its own handler drains it first (and what uvicorn re-raises after
    # its shutdown lands here too).
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(1 if supervisor.gave_up else 0))
    flags, env = replica_options(settings)  # traces on: the replicas export theirs to the same place
    for process in processes:
        if flags and "--otlp-traces-endpoint" not in process.extra_args:
            process.extra_args = (*process.extra_args, *flags)
            process.extra_env = env | process.extra_env
    log.info("starting %d vLLM replica(s) on %s", len(processes), ", ".join(supervisor.urls))
    try:
        supervisor.start()
        run(dataclasses.replace(settings, upstreams=supervisor.urls,
                                kv_events=[*settings.kv_events, *(events.spec for events in kv_events)]), workers)
    except VLLMError as exc:
        log.error("%s", exc)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        supervisor.stop()
        signal.signal(signal.SIGTERM, previous)
    return 1 if supervisor.gave_up else 0
