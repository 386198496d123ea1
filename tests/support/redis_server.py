"""A real `redis-server` of the test's own, on a free loopback port, that a test can restart.

    with RedisServer() as redis_server:
        Settings(..., state_url=redis_server.url)
        redis_server.restart()  # empty again, same port: a Redis that lost its data

Debian's `redis-server` package provides the binary (`.ci/run` and `scripts/bootstrap.sh`
install it). Nothing is saved to disk.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Self

import pytest

from gateway.ops.vllm_process import free_port
from tests.support.waiting import DEADLINE

# The gateway's deadline for a store call (0.5 s unless the URL says otherwise) is for a store
# that stopped answering; on a loaded 2-core machine a working one can miss it (a 40,000-token
# read under a parallel test run did). The tests' stores get ten seconds: what a store that
# is down or lost its data does is tested by stopping or restarting it, not by its speed.
SOCKET_TIMEOUT = "socket_timeout=10"


class RedisServer:
    def __init__(self, *, maxmemory: str | None = None) -> None:
        self.port = free_port()
        self.maxmemory = maxmemory
        self.dir = Path(tempfile.mkdtemp(prefix="gateway-test-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0?{SOCKET_TIMEOUT}"

    def start(self) -> Self:
        binary = shutil.which("redis-server")
        if binary is None:
            message = "redis-server is not installed (apt-get install redis-server; scripts/bootstrap.sh does it)"
            pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.dir)]
        if self.maxmemory:
            args += ["--maxmemory", self.maxmemory, "--maxmemory-policy", "noeviction"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + DEADLINE
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)
        self.process = None

    def restart(self) -> None:
        """Killed and started again on the same port, empty (as a Redis without persistence)."""
        self.stop()
        self.start()

    def command(self, *args: str) -> Any:
        """One command with the real client (for a test's own look at the store)."""
        import redis

        with redis.Redis.from_url(self.url) as client:
            return client.execute_command(*args)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
