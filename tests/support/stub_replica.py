"""tests/support/stub_vllm.py as a replica of the pool that a test kills: a real process behind
the gateway that dies (`kill -9`), for the tests that look at what the gateway then shows.

    with stub_replica() as stub:
        Settings(upstreams=[vllm.url, stub.url], ...)
        stub.kill()
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from gateway.ops.vllm_process import free_port
from tests.support.waiting import wait_for

STUB = Path(__file__).with_name("stub_vllm.py")


@dataclass
class StubReplica:
    url: str
    process: subprocess.Popen

    def kill(self) -> None:
        """SIGKILL, as a replica that crashed: no goodbye on its connections."""
        self.process.kill()
        self.process.wait()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def stub_replica() -> Iterator[StubReplica]:
    port = free_port()
    process = subprocess.Popen([sys.executable, str(STUB), "--port", str(port)], stdout=subprocess.DEVNULL)
    stub = StubReplica(f"http://127.0.0.1:{port}", process)
    try:
        wait_for(lambda: _answers(stub.url + "/health"), "the stub replica answers")
        yield stub
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
