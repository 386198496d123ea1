"""Chat Completions requests as RL clients send them, over the scripted fake vLLM: what the
adapter refuses (a clear 400, never a 500) and how a tool-call limit ends a turn the replica
did not end itself."""

from __future__ import annotations

import httpx
import pytest

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, TOOL_CALL, ids
from tests.support.stack import fake_stack

GENERATE = "/inference/v1/generate"
TOOLS = [{"type": "function", "function": {"name": "exec_command", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def stack(qwen_tokenizer_dir):
    with fake_stack(qwen_tokenizer_dir, served_model_name="tiny-qwen3") as stack:
        yield stack


@pytest.fixture
def fake(stack):
    stack.reset()
    return stack.fake


def post(stack, **body):
    return httpx.post(stack.url + "/v1/chat/completions", json={"model": "tiny-qwen3", **body}, timeout=30)


@pytest.mark.parametrize("rollout", [{"rollout_id": "first-is-assistant"}, {}])
def test_ids_on_an_assistant_message_with_no_history_before_it_are_a_400(stack, fake, rollout):
    """The ids of a call are the prompt of the history before its message: an assistant
    messages[0] has none (found by fuzzing: it was a 500 from the template render)."""
    response = post(stack, messages=[{"role": "assistant", "content": "hi", "prompt_token_ids": [1],
                                      "generation_token_ids": [2]},
                                     {"role": "user", "content": "go on"}], **rollout)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "messages[0].prompt_token_ids"
    assert "no history before it" in error["message"]
    assert fake.bodies(GENERATE) == []
