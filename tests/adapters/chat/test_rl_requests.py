"""Chat Completions requests as RL clients send them, over the scripted fake vLLM: what the
adapter refuses (a clear 400, never a 500) and how a tool-call limit ends a turn the replica
did not end itself."""

from __future__ import annotations

import httpx
import pytest

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, TOOL_CALL, ids
from tests.support.waiting import wait_for

GENERATE = "/inference/v1/generate"
TOOLS = [{"type": "function", "function": {"name": "exec_command", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}}}}]


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


def call(tokenizer, cmd):
    return [TOOL_CALL, *ids(tokenizer, f'\n{{"name": "exec_command", "arguments": {{"cmd": "{cmd}"}}}}\n'),
            END_TOOL_CALL]


def test_parallel_tool_calls_false_ends_the_turn_at_the_first_call_the_replica_wrote(stack, fake, tokenizer):
    """Structured outputs off (or an older vLLM): the replica writes a second call anyway. The
    gateway ends the turn where the first call ends — ids, calls, and the next prompt alike — and
    stops the replica's generation."""
    first, second = call(tokenizer, "ls"), call(tokenizer, "pwd")
    fake.queue(Script([*first, *ids(tokenizer, "\n"), *second, IM_END], hang=True),
               Script([*ids(tokenizer, "Done."), IM_END]))
    messages = [{"role": "user", "content": "list"}]
    body = post(stack, messages=messages, tools=TOOLS, parallel_tool_calls=False, return_token_ids=True,
                rollout_id="one-call").json()
    choice = body["choices"][0]
    assert [c["function"]["arguments"] for c in choice["message"]["tool_calls"]] == ['{"cmd": "ls"}']
    assert choice["finish_reason"] == "tool_calls"
    assert choice["token_ids"] == first
    wait_for(lambda: len(fake.disconnected) == 1, "the generation was stopped")  # not waited for: it hangs

    messages += [{k: v for k, v in choice["message"].items() if v is not None and k != "prompt_token_ids"
                  and k != "generation_token_ids" and k != "generation_log_probs"},
                 {"role": "tool", "tool_call_id": choice["message"]["tool_calls"][0]["id"], "content": "a"}]
    post(stack, messages=messages, tools=TOOLS, rollout_id="one-call")
    prompt = fake.bodies(GENERATE)[-1]["token_ids"]
    assert prompt[:len(body["prompt_token_ids"]) + len(first) + 1] == [*body["prompt_token_ids"], *first, IM_END]
    rollout = httpx.get(f"{stack.url}/v1/rollouts/one-call").json()
    assert [t["spliced"] for t in rollout["turns"]] == [False, True]


def test_a_single_call_keeps_the_stop_token_the_replica_wrote(stack, fake, tokenizer):
    first = call(tokenizer, "ls")
    fake.queue(Script([*first, IM_END], stop_reason=IM_END))
    choice = post(stack, messages=[{"role": "user", "content": "list"}], tools=TOOLS, parallel_tool_calls=False,
                  return_token_ids=True).json()["choices"][0]
    assert choice["token_ids"] == [*first, IM_END]
    assert len(choice["message"]["tool_calls"]) == 1


def test_max_tool_calls_ends_the_response_after_that_many_calls(stack, fake, tokenizer):
    calls = [call(tokenizer, cmd) for cmd in ("a", "b", "c")]
    newline = ids(tokenizer, "\n")
    fake.queue(Script([*calls[0], *newline, *calls[1], *newline, *calls[2], IM_END]))
    response = httpx.post(stack.url + "/v1/responses", timeout=30, json={
        "model": "tiny-qwen3", "input": "list", "max_tool_calls": 2, "return_token_ids": True,
        "tools": [{"type": "function", **TOOLS[0]["function"]}]}).json()
    assert [item["arguments"] for item in response["output"] if item["type"] == "function_call"] == [
        '{"cmd": "a"}', '{"cmd": "b"}']
