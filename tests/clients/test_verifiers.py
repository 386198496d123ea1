"""verifiers 0.3.1 (prime-rl's environments) through the gateway, unmodified: a ToolEnv rollout
with its `openai_chat_completions` client (vLLM's `return_token_ids` and `logprobs`, no session
key) and its `nemorl_chat_completions` client (NeMo-RL's ids put back on assistant messages),
over the scripted fake vLLM. The real library runs in its own venv
(scripts/install-rl-clients.sh), driven by tests/clients/drivers/verifiers_tool_rollout.py.

What the trainer gets must be what the replica got and generated, turn by turn, and each
turn's prompt + completion must be a prefix of the next turn's prompt (verifiers' own rule for
a multi-turn sample to be trainable as one sequence).
"""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path

import pytest

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, TOOL_CALL, ids

GENERATE = "/inference/v1/generate"
DRIVER = Path(__file__).parent / "drivers" / "verifiers_tool_rollout.py"


def turns(tokenizer, drifting):
    """A call of the tool, then the answer. `drifting`: the call's arguments sampled as pieces a
    re-tokenization would merge (so only exact ids keep the next prompt on-policy)."""
    text = ['\n{"name": "add", "argu', 'ments": {"a": 2, "b": 3}}\n']
    arguments = [*ids(tokenizer, text[0]), *ids(tokenizer, text[1])] if drifting else ids(tokenizer, "".join(text))
    assert (ids(tokenizer, tokenizer.decode(arguments)) != arguments) == drifting
    call = [TOOL_CALL, *arguments, END_TOOL_CALL, IM_END]
    answer = [*ids(tokenizer, "The ans"), *ids(tokenizer, "wer is 5."), IM_END]
    return call, answer


# The plain client sends no session key and no ids: the gateway renders its history afresh, exact
# while the model's tokens re-tokenize as they were sampled. NeMo-RL's client sends the ids back:
# exact whatever the model sampled.
@pytest.mark.parametrize(("client_type", "drifting"), [("openai_chat_completions", False),
                                                       ("nemorl_chat_completions", True)])
def test_tool_env_rollout_ids_are_what_the_replica_got_and_generated(stack, tokenizer, rl_clients_python,
                                                                     client_type, drifting):
    stack.reset()
    generated = turns(tokenizer, drifting)
    stack.fake.queue(*(Script(g, logprobs=[-0.5] * len(g), stop_reason=IM_END) for g in generated))
    run = subprocess.run([str(rl_clients_python), str(DRIVER), stack.url, "tiny-qwen3", client_type],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-4000:]
    [output] = json.loads(run.stdout.strip().splitlines()[-1])
    steps = [step["tokens"] for step in output["trajectory"]]
    sent = [body["token_ids"] for body in stack.fake.bodies(GENERATE)]
    assert [step["prompt_ids"] for step in steps] == sent
    assert [step["completion_ids"] for step in steps] == [list(g) for g in generated]
    assert steps[0]["completion_logprobs"] == [-0.5] * len(generated[0])
    for before, after in itertools.pairwise(steps):  # the prefix rule, turn to turn
        assert after["prompt_ids"][:len(before["prompt_ids"]) + len(before["completion_ids"])] == \
            before["prompt_ids"] + before["completion_ids"]
    assert output["completion"][-1]["content"] == "The answer is 5."
