"""The processes a measurement runs: token server, gateway, load generator; cores and RSS.

Each runs as its own OS process so its CPU time is its own. With two or more cores the
gateway gets one to itself (`GATEWAY_CPU`) and everything else shares the rest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from gateway.ops.vllm_process import free_port

ROOT = Path(__file__).resolve().parent.parent


def cores() -> tuple[int, int]:
    """(the gateway's core, the core of the token server and load generator)."""
    available = sorted(os.sched_getaffinity(0))
    return available[0], available[-1]


GATEWAY_CPU, CLIENT_CPU = cores()


@dataclass
class Process:
    popen: subprocess.Popen
    url: str
    port: int

    @property
    def pid(self) -> int:
        return self.popen.pid

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no VmRSS for pid {self.pid}")

    def cpu_seconds(self) -> float:
        return sum(self.cpu_times())

    def thread_cpu_ns(self) -> dict[int, int]:
        """Each live thread's CPU time in ns (the scheduler's own count, /proc/…/task/*/schedstat),
        by thread id: the process's first thread (the event loop) has the process's id."""
        times = {}
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                times[int(task.name)] = int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):  # a thread that just ended
                continue
        return times

    def cpu_times(self) -> tuple[float, float]:
        """(user, system) CPU seconds: the process's own work, and the kernel's on its behalf."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick  # utime, stime


def _env() -> dict[str, str]:
    # The children import this checkout's `gateway` and `bench`, whatever is installed.
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}


@contextmanager
def _running(args: Sequence[str], url: str, port: int, cpu: int | None, ready: str) -> Iterator[Process]:
    popen = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=_env(), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE if ready == "stdout" else subprocess.DEVNULL, stderr=None)
    if cpu is not None:  # before the interpreter is up: the threads it starts later inherit the pinning
        os.sched_setaffinity(popen.pid, {cpu})
    process = Process(popen, url, port)
    try:
        if ready == "stdout":
            assert popen.stdout is not None
            if popen.stdout.readline().strip() != b"ready":
                raise RuntimeError(f"{args} did not start")
        else:
            _wait_healthy(process)
        yield process
    finally:
        popen.terminate()
        try:
            popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()


def _wait_healthy(process: Process, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise RuntimeError(f"the gateway exited with code {process.popen.returncode}")
        try:
            if httpx.get(process.url + "/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{process.url} never became healthy")


@contextmanager
def token_server(model: str, tokens: Sequence[int], *, step_ms: float = 0.0,
                 cpu: int | None = CLIENT_CPU, extra: Sequence[str] = ()) -> Iterator[Process]:
    port = free_port()
    args = ["-m", "bench.upstream", "--port", str(port), "--model", model,
            "--tokens", ",".join(map(str, tokens)), "--step-ms", str(step_ms), *extra]
    with _running(args, f"http://127.0.0.1:{port}", port, cpu, "stdout") as process:
        yield process


@contextmanager
def gateway(upstream: str, model: str, chat_format: str, *, cpu: int | None = GATEWAY_CPU,
            extra: Sequence[str] = (), module: str = "gateway") -> Iterator[Process]:
    """`module` (`python -m`): the gateway's own, or a module that runs it (bench.timed_gateway)."""
    port = free_port()
    args = ["-m", module, "serve", "--upstream", upstream, "--model", model, "--chat-format", chat_format,
            "--port", str(port), "--log-level", "warning", *extra]
    with _running(args, f"http://127.0.0.1:{port}", port, cpu, "health") as process:
        yield process


def load(config: dict, cpu: int | None = CLIENT_CPU) -> dict:
    """Run bench.loadgen with `config` in a child process and return its result."""
    result = subprocess.run([sys.executable, "-m", "bench.loadgen"], check=False, cwd=ROOT, env=_env(),
                            input=json.dumps({**config, "cpu": cpu}).encode(), capture_output=True)
    if result.returncode != 0:
        raise RuntimeError(f"the load generator failed:\n{result.stderr.decode()[-3000:]}")
    return json.loads(result.stdout)


@contextmanager
def script_proxy(upstream: str, cpu: int | None = CLIENT_CPU) -> Iterator[Process]:
    """bench.versus_script in front of `upstream`: vLLM's timing, the session's scripted tokens."""
    port = free_port()
    args = ["-m", "bench.versus_script", "--port", str(port), "--upstream", upstream]
    with _running(args, f"http://127.0.0.1:{port}", port, cpu, "health") as process:
        yield process
