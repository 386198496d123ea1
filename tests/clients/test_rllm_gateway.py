"""rLLM's model gateway (rllm-model-gateway 0.1.0, PyPI) run as a real process in front of the
gateway, as rLLM trainers run it in front of vLLM: the traces it captures carry the exact
prompt and completion ids — what the replica got and generated — streamed and not.

It reads vLLM's fields (rllm_model_gateway/data_process.py): `prompt_token_ids` at the top
(streamed: on the first chunk) and `choices[0].token_ids` (streamed: each chunk's, appended).
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator

import httpx
import pytest

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.waiting import wait_for

GENERATE = "/inference/v1/generate"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def rllm(stack, rl_clients_python) -> Iterator[str]:
    port = _free_port()
    process = subprocess.Popen([str(rl_clients_python), "-m", "rllm_model_gateway", "--host", "127.0.0.1",
                                "--port", str(port), "--worker", stack.url + "/v1", "--store", "memory"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(url) or process.poll() is not None, "rLLM's gateway answered", timeout=60)
        assert process.poll() is None, process.stderr.read().decode()[-2000:] if process.stderr else ""
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.parametrize("stream", [True, False])
def test_captured_traces_carry_the_exact_ids(stack, rllm, tokenizer, stream):
    stack.reset()
    generated = [*ids(tokenizer, "Hel"), *ids(tokenizer, "lo there"), IM_END]
    stack.fake.queue(Script(generated, logprobs=[-0.5] * len(generated)))
    session = f"rllm-{stream}"
    body = {"model": "tiny-qwen3", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    with httpx.stream("POST", f"{rllm}/sessions/{session}/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200, response.read()
        response.read()
    [trace] = httpx.get(f"{rllm}/sessions/{session}/traces", timeout=30).json()
    assert trace["prompt_token_ids"] == stack.fake.bodies(GENERATE)[-1]["token_ids"]
    assert trace["completion_token_ids"] == generated
