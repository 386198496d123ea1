"""The real `vllm-gateway serve` as a child process, for tests that signal it or read its memory.

    with gateway_process(qwen_tokenizer_dir, [fake.url], tmp_path / "gw.log", "--drain-timeout", "4") as (url, proc):
        ...
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.gateway_server import free_port
from tests.support.waiting import PROCESS_START

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def gateway_process(model_dir: Path | str, upstreams: list[str], log_path: Path, *args: str,
                    model_name: str = "tiny-qwen3",
                    env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """The gateway's URL and process once it is ready (`env`: more environment); killed at exit
    if still running."""
    port = free_port()
    command = [sys.executable, "-m", "gateway", "serve", "--model", str(model_dir), "--served-model-name", model_name,
               "--port", str(port), *[a for u in upstreams for a in ("--upstream", u)], *args]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)})
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + PROCESS_START
            while not _ready(url):
                assert process.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "the gateway did not become ready"
                time.sleep(0.2)
            yield url, process
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in kB, from /proc/PID/status."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/ready").status_code == 200
    except httpx.HTTPError:
        return False
