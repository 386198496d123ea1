"""`--workers N`: N gateway processes on one port, sharing one state store.

One gateway process relays about 10k engine-paced token events per second (one core); more
processes scale that linearly, but only if any of them can continue any session exactly —
so they share their state through Redis (`--state-url`). Without one, a private
`redis-server` is started on a unix socket in a temporary directory (and stopped with the
gateway) when it is installed; otherwise the gateway refuses to start, saying what to
install or pass.

Each worker binds the port with SO_REUSEPORT, so the kernel spreads new connections evenly
over them; each is a whole gateway (drain on SIGTERM included). The parent forwards
SIGTERM/SIGINT to the workers, restarts a worker that died, and exits when they all have.
Replica choice is the same in every worker (rendezvous hashing on a fixed hash); each
worker counts only its own requests in flight per replica.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gateway.core.settings import Settings

__all__ = ["WorkersError", "serve_workers"]

log = logging.getLogger(__name__)


class WorkersError(Exception):
    pass


@contextmanager
def private_redis() -> Iterator[str]:
    """A `redis-server` of this gateway's own on a unix socket; yields its `unix://` URL."""
    server = shutil.which("redis-server")
    if server is None:
        raise WorkersError("--workers N > 1 shares sessions, stored responses and rollouts between the processes "
                           "through Redis: pass --state-url redis://host:port/0 (or GATEWAY_STATE_URL), or install "
                           "redis-server (Debian/Ubuntu: apt-get install redis-server) for a private one")
    home = Path(tempfile.mkdtemp(prefix="vllm-gateway-redis-"))
    path = home / "redis.sock"
    process = subprocess.Popen([server, "--port", "0", "--unixsocket", str(path), "--unixsocketperm", "700",
                                "--save", "", "--appendonly", "no", "--dir", str(home)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not path.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise WorkersError(f"the private redis-server did not start (exit {process.poll()})")
            time.sleep(0.02)
        log.info("private redis-server for the workers' shared state on %s", path)
        yield f"unix://{path}"
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(home, ignore_errors=True)


def serve_workers(settings: Settings, workers: int) -> int:
    """Serve `settings` with `workers` processes on one port until a signal; the exit code."""
    if settings.reasoning_secret is None:  # one key for all: a blob one worker signed, another reads
        settings = dataclasses.replace(settings, reasoning_secret=secrets.token_hex(32))
    if settings.state_url:
        return _serve(settings, workers)
    with private_redis() as url:
        return _serve(dataclasses.replace(settings, state_url=url), workers)


def _serve(settings: Settings, workers: int) -> int:
    _bind(settings).close()  # the port is free (a clear error here, not in N workers)
    context = multiprocessing.get_context("spawn")
    stopping = False

    def start(index: int) -> multiprocessing.process.BaseProcess:
        process = context.Process(target=_worker, args=(settings,), name=f"gateway-worker-{index}")
        process.start()
        return process

    def stop(sig: int, _frame: object) -> None:
        nonlocal stopping
        if not stopping:
            log.info("%s: stopping the gateway workers", signal.Signals(sig).name)
        stopping = True
        for process in processes:
            if process.pid is not None and process.is_alive():
                os.kill(process.pid, sig)

    processes = [start(i) for i in range(workers)]
    log.info("%d gateway workers on %s:%d sharing state at %s", workers, settings.host, settings.port,
             settings.state_url.rpartition("@")[2] if settings.state_url else None)
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while any(p.is_alive() for p in processes) or not stopping:
            for i, process in enumerate(processes):
                if not process.is_alive() and not stopping:
                    log.warning("gateway worker %d exited (%s): starting it again", i, process.exitcode)
                    processes[i] = start(i)
            time.sleep(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _bind(settings: Settings) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((settings.host, settings.port))
    return sock


def _worker(settings: Settings) -> None:
    from gateway.core.logs import configure_logging
    from gateway.server.app import create_app
    from gateway.server.drain import GracefulServer
    from gateway.server.slow_clients import uvicorn_config

    configure_logging(os.environ.get("GATEWAY_LOG_FORMAT", "text"), settings.log_level)
    app = create_app(settings)
    GracefulServer(uvicorn_config(app, settings), app).run(sockets=[_bind(settings)])
