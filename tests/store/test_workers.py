"""Gateway processes of their own (the CLI): `serve --workers 2`, and one killed with SIGKILL."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from gateway.ops.vllm_process import free_port
from tests.store.test_two_gateways import FIRST, GENERATE, assert_exact, codex_turn, next_history, tool_call
from tests.support.fake_vllm import FakeVLLM
from tests.support.gateway_server import wait_healthy
from tests.support.redis_server import RedisServer


@contextmanager
def gateway_process(model_dir: Path, upstream: str, log: Path, *flags: str) -> Iterator[tuple[str, subprocess.Popen]]:
    port = free_port()
    command = [sys.executable, "-m", "gateway", "serve", "--upstream", upstream, "--model", str(model_dir),
               "--served-model-name", "tiny-qwen3", "--port", str(port), *flags]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy_or_dead(url, process, log)
        yield url, process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def wait_healthy_or_dead(url: str, process: subprocess.Popen, log: Path) -> None:
    try:
        wait_healthy_until(url, process)
    except RuntimeError:
        raise RuntimeError(f"the gateway did not start:\n{log.read_text()[-3000:]}") from None


def wait_healthy_until(url: str, process: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("exited")
        try:
            wait_healthy(url, timeout=0.5)
            return
        except (RuntimeError, httpx.HTTPError):
            time.sleep(0.2)
    raise RuntimeError("never healthy")


def test_serve_workers_2_continues_many_sessions_exactly(qwen_tokenizer_dir, tokenizer, tmp_path):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    with FakeVLLM(max_model_len=16384) as fake, \
            gateway_process(qwen_tokenizer_dir, fake.url, tmp_path / "gw.log", "--workers", "2") as (url, _):
        histories = {f"thread-{i}": FIRST for i in range(6)}
        for step in range(3):
            for key, history in list(histories.items()):  # fresh connections, spread over both workers
                fake.queue(tool_call(tokenizer, step))
                histories[key] = next_history(history, codex_turn(url, history, key=key), step)
        prompts = [body["token_ids"] for body in fake.bodies(GENERATE)]
        for i in range(6):
            assert_exact(prompts[i::6], tokenizer, range(3))
    log = (tmp_path / "gw.log").read_text()
    assert "private redis-server" in log and log.count("event loop: uvloop") == 2  # both workers on uvloop


def test_a_gateway_killed_mid_session_leaves_the_next_turn_exact_on_another(qwen_tokenizer_dir, tokenizer, tmp_path):
    with RedisServer() as redis_server, FakeVLLM(max_model_len=16384) as fake:
        state = ("--state-url", redis_server.url)
        with gateway_process(qwen_tokenizer_dir, fake.url, tmp_path / "a.log", *state) as (a, process_a), \
                gateway_process(qwen_tokenizer_dir, fake.url, tmp_path / "b.log", *state) as (b, _):
            history = FIRST
            for step, url in enumerate([a, b, a]):
                fake.queue(tool_call(tokenizer, step))
                history = next_history(history, codex_turn(url, history), step)
            os.killpg(process_a.pid, signal.SIGKILL)
            process_a.wait()
            for step in (3, 4):
                fake.queue(tool_call(tokenizer, step))
                history = next_history(history, codex_turn(b, history), step)
        prompts = [body["token_ids"] for body in fake.bodies(GENERATE)]
        assert len(prompts) == 5
        assert_exact(prompts, tokenizer, range(5))


def test_workers_without_a_state_url_or_redis_server_refuse_saying_what_to_do(qwen_tokenizer_dir):
    command = [sys.executable, "-m", "gateway", "serve", "--upstream", "http://127.0.0.1:9", "--model",
               str(qwen_tokenizer_dir), "--port", str(free_port()), "--workers", "2"]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": "/nonexistent", "GATEWAY_STATE_URL": ""})
    assert done.returncode != 0
    assert "--state-url" in done.stderr and "apt-get install redis-server" in done.stderr
