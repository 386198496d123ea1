"""examples/rl/agent_loop.py, run as a trainer would run it, against the scripted fake vLLM:
GRPO's `n` episodes of a calculator task, exported as verl / slime samples in one request."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import httpx
import pytest

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, TOOL_CALL, ids
from tests.support.trainer_shapes import SlimeSample, VerlAgentLoopOutput

GENERATE = "/inference/v1/generate"
_SPEC = importlib.util.spec_from_file_location("agent_loop", Path(__file__).parents[2] / "examples/rl/agent_loop.py")
assert _SPEC is not None and _SPEC.loader is not None
agent_loop = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(agent_loop)


def test_the_calculator_tool_evaluates_arithmetic_only():
    assert agent_loop.run_tool("calculate", '{"expression": "17 * (23 + 4)"}') == "459"
    assert agent_loop.run_tool("calculate", '{"expression": "__import__(\'os\')"}').startswith("error")


@pytest.mark.parametrize("trainer", ["verl", "slime"])
def test_grpo_group_of_tool_using_episodes_exports_exact_samples(stack, tokenizer, trainer):
    stack.reset()
    call = [TOOL_CALL, *ids(tokenizer, '\n{"name": "calculate", "arguments": {"expression": "17 * (23 + 4)"}}\n'),
            END_TOOL_CALL, IM_END]
    answer = [*ids(tokenizer, "459"), IM_END]
    n = 2
    for _ in range(n):
        stack.fake.queue(Script(call, logprobs=[-0.1] * len(call)), Script(answer, logprobs=[-0.2] * len(answer)))
    samples = agent_loop.collect(stack.url, "tiny-qwen3", f"calc-{trainer}", "What is 17 * (23 + 4)?", n, trainer)
    prompts = [body["token_ids"] for body in stack.fake.bodies(GENERATE)]
    assert len(samples) == n and len(prompts) == 2 * n
    for i, sample in enumerate(samples):
        first, second = prompts[2 * i], prompts[2 * i + 1]
        delta = second[len(first) + len(call):]
        assert second[:len(first) + len(call)] == [*first, *call]  # exact: the model's own tool-call tokens
        assert "459" in tokenizer.decode(delta)  # the tool's output went into the next prompt
        mask = [1] * len(call) + [0] * len(delta) + [1] * len(answer)
        if trainer == "verl":
            verl = VerlAgentLoopOutput.model_validate(sample)
            assert verl.prompt_ids == first and verl.response_ids == [*call, *delta, *answer]
            assert verl.response_mask == mask and verl.num_turns == 2
            assert verl.extra_fields["rollout_id"] == f"calc-verl-{i}"
        else:
            slime = SlimeSample.model_validate(sample)
            assert slime.tokens == [*second, *answer] and slime.loss_mask == mask
            assert slime.rollout_log_probs == [-0.1] * len(call) + [0.0] * len(delta) + [-0.2] * len(answer)
    assert httpx.get(f"{stack.url}/v1/rollouts/calc-{trainer}-0").status_code == 410  # freed once exported


@pytest.mark.vllm
def test_the_example_against_real_vllm(vllm_qwen, qwen_model_dir):
    """The tiny random model rarely calls the tool; what it does is exported exactly all the same."""
    from gateway.core.settings import Settings
    from tests.support.gateway_server import running_gateway
    from tests.support.recording_proxy import RecordingProxy

    with RecordingProxy(vllm_qwen.url) as proxy, \
            running_gateway(Settings(model=str(qwen_model_dir), upstreams=[proxy.url])) as url:
        samples = agent_loop.collect(url, vllm_qwen.served_model_name, "real", "What is 2+2?", 2, "verl",
                                     temperature=1.0, max_tokens=16, seed=7)
        exchanges = list(proxy.exchanges)
    assert len(samples) == 2
    for sample in samples:
        verl = VerlAgentLoopOutput.model_validate(sample)
        full = [*verl.prompt_ids, *verl.response_ids]
        last = next(e for e in exchanges if e.prompt + e.output == full)  # what vLLM last saw and made
        assert verl.response_mask[-len(last.output):] == [1] * len(last.output)
        assert any(e.prompt == verl.prompt_ids for e in exchanges)  # the episode's first prompt
