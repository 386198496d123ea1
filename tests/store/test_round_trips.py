"""Round trips to a real redis-server per turn, counted with its MONITOR: a turn that resends
its whole history (`store: false`, a `prompt_cache_key`) and continues the session this
process served before makes one session read before generating and one append after — two
round trips, the least a read-then-write can make."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from gateway.core.settings import Settings
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.gateway_server import running_gateway
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_for

HELLO, IM_END = 9707, 151645
_END = "monitored-block-ended"


@contextmanager
def monitored(redis: RedisServer, path: Path) -> Iterator[list[str]]:
    """The commands clients send while the block runs (not those a script runs inside Redis)."""
    seen: list[str] = []
    with path.open("w") as out:
        monitor = subprocess.Popen([shutil.which("redis-cli") or "redis-cli", "-p", str(redis.port), "monitor"],
                                   stdout=out)
        wait_for(lambda: path.read_text().startswith("OK"), "MONITOR started")
        try:
            yield seen
        finally:  # a marker sent after the block: MONITOR shows commands in the order Redis ran them
            subprocess.run([shutil.which("redis-cli") or "redis-cli", "-p", str(redis.port), "echo", _END],
                           check=True, capture_output=True)
            wait_for(lambda: _END in path.read_text(), "MONITOR's last lines")
            monitor.terminate()
            monitor.wait()
    seen += [line for line in path.read_text().splitlines()[1:] if "[0 lua]" not in line and _END not in line]


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli (Debian's redis-tools) not installed")
def test_a_resent_turn_makes_one_read_and_one_write(qwen_tokenizer_dir, tmp_path):
    with RedisServer() as redis, FakeVLLM() as fake, running_gateway(Settings(
            model=str(qwen_tokenizer_dir), upstreams=[fake.url], served_model_name="tiny-qwen3",
            state_url=redis.url)) as url:
        history: list = [{"role": "user", "content": "hi"}]
        for turn in range(3):
            fake.queue(Script([HELLO, IM_END]))
            body = {"model": "tiny-qwen3", "input": history, "store": False, "prompt_cache_key": "thread"}
            if turn < 2:
                response = httpx.post(url + "/v1/responses", json=body, timeout=30)
            else:
                with monitored(redis, tmp_path / "monitor.txt") as commands:
                    response = httpx.post(url + "/v1/responses", json=body, timeout=30)
            assert response.status_code == 200, response.text
            history += [*response.json()["output"], {"role": "user", "content": f"and {turn}"}]
        prompt = fake.bodies("/inference/v1/generate")[-1]["token_ids"]
        previous = fake.bodies("/inference/v1/generate")[-2]["token_ids"]
        assert prompt[:len(previous) + 2] == [*previous, HELLO, IM_END]  # spliced: the exact earlier tokens
    assert len(commands) == 2, commands
    read, write = commands
    assert '"EVALSHA"' in read and '"gw:s:{thread}"' in read and '"append"' not in read
    assert '"EVALSHA"' in write and '"gw:s:{thread}" "append"' in write
