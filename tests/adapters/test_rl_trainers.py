"""What RL trainers read, over the scripted fake vLLM: NeMo-RL's fields on the returned
message / output item, verl and slime samples, the streamed bulk export.

verl and slime are not installable here (torch, ray, megatron): every export is checked
against their sample shapes as tests/support/trainer_shapes.py restates them.
"""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, TOOL_CALL, ids
from tests.support.trainer_shapes import SlimeSample, VerlAgentLoopOutput

GENERATE = "/inference/v1/generate"
TOOLS = [{"type": "function", "function": {"name": "exec_command", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}}}}]


@pytest.fixture
def url(stack):
    return stack.url


def chat(url, messages, **extra):
    response = httpx.post(url + "/v1/chat/completions", timeout=30,
                          json={"model": "tiny-qwen3", "messages": messages, "tools": TOOLS, **extra})
    assert response.status_code == 200, response.text
    return response.json()


def tool_call(tokenizer):
    return [TOOL_CALL, *ids(tokenizer, '\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n'), END_TOOL_CALL,
            IM_END]


def test_chat_message_carries_nemo_rl_fields_and_sent_back_they_are_the_exact_prefix(fake, url, tokenizer):
    first, second = tool_call(tokenizer), [*ids(tokenizer, "Done."), IM_END]
    fake.queue(Script(first, logprobs=[-0.5] * len(first)), Script(second))
    messages = [{"role": "user", "content": "list"}]
    one = chat(url, messages, return_token_ids=True)
    message = one["choices"][0]["message"]
    prompt1 = fake.bodies(GENERATE)[-1]["token_ids"]
    assert message["prompt_token_ids"] == prompt1 == one["prompt_token_ids"]
    assert message["generation_token_ids"] == first == one["choices"][0]["token_ids"]
    assert message["generation_log_probs"] == [-0.5] * len(first)

    # NeMo-RL sends the message back as it came: its ids are the prefix, checked and spliced.
    call = message["tool_calls"][0]
    messages += [{k: v for k, v in message.items() if v is not None},
                 {"role": "tool", "tool_call_id": call["id"], "content": "a.txt"}]
    chat(url, messages, rollout_id="nemo")
    prompt2 = fake.bodies(GENERATE)[-1]["token_ids"]
    assert prompt2[:len(prompt1) + len(first)] == [*prompt1, *first]
    turn = httpx.get(f"{url}/v1/rollouts/nemo").json()["turns"][0]
    assert turn["spliced"] and not turn["non_monotonic"]


def test_responses_last_output_item_carries_nemo_rl_fields(fake, url, tokenizer):
    first = tool_call(tokenizer)
    fake.queue(Script(first, logprobs=[-0.25] * len(first)))
    body = httpx.post(url + "/v1/responses", timeout=30, json={
        "model": "tiny-qwen3", "input": "list", "tools": [{"type": "function", **TOOLS[0]["function"]}],
        "return_token_ids": True}).json()
    last = body["output"][-1]
    assert last["type"] == "function_call"
    assert last["prompt_token_ids"] == fake.bodies(GENERATE)[-1]["token_ids"] == body["prompt_token_ids"]
    assert last["generation_token_ids"] == first == body["output_token_ids"]
    assert last["generation_log_probs"] == [-0.25] * len(first)
    assert all("generation_token_ids" not in item for item in body["output"][:-1])


def _episode(fake, url, tokenizer, rollout_id):
    """A two-call tool-using episode; returns (prompt of call 1, what the rollout holds)."""
    first, second = tool_call(tokenizer), [*ids(tokenizer, "Two files."), IM_END]
    fake.queue(Script(first, logprobs=[-0.25] * len(first)), Script(second, logprobs=[-0.5] * len(second)))
    messages = [{"role": "user", "content": "list"}]
    one = chat(url, messages, rollout_id=rollout_id)
    prompt1 = fake.bodies(GENERATE)[-1]["token_ids"]
    call = one["choices"][0]["message"]["tool_calls"][0]
    messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": call["id"], "content": "a.txt b.txt"}]
    chat(url, messages, rollout_id=rollout_id, temperature=0.7)
    prompt2 = fake.bodies(GENERATE)[-1]["token_ids"]
    return prompt1, first, prompt2, second


def test_verl_export_is_one_agent_loop_output_per_segment(fake, url, tokenizer):
    prompt1, first, prompt2, second = _episode(fake, url, tokenizer, "verl-1")
    body = httpx.get(f"{url}/v1/rollouts/verl-1", params={"format": "verl"}).json()
    assert body["format"] == "verl" and len(body["data"]) == 1
    sample = VerlAgentLoopOutput.model_validate(body["data"][0])
    delta = prompt2[len(prompt1) + len(first):]
    assert sample.prompt_ids == prompt1
    assert sample.response_ids == [*first, *delta, *second] == [*prompt2, *second][len(prompt1):]
    assert sample.response_mask == [1] * len(first) + [0] * len(delta) + [1] * len(second)
    assert sample.response_logprobs == [-0.25] * len(first) + [0.0] * len(delta) + [-0.5] * len(second)
    assert sample.num_turns == 2
    turns = sample.extra_fields["turns"]
    assert [t["stop_token_id"] for t in turns] == [IM_END, IM_END]
    assert turns[1]["sampling"]["temperature"] == 0.7 and turns[0]["replica"].startswith("http://")
    assert all(t["timing"]["total_s"] >= t["timing"]["first_token_s"] >= 0 for t in turns)


def test_slime_export_and_a_new_segment_is_its_own_sample(fake, url, tokenizer):
    prompt1, first, prompt2, second = _episode(fake, url, tokenizer, "slime-1")
    third = [*ids(tokenizer, "Fresh."), IM_END]
    fake.queue(Script(third))
    chat(url, [{"role": "user", "content": "start over"}], rollout_id="slime-1")  # a rewritten history
    prompt3 = fake.bodies(GENERATE)[-1]["token_ids"]
    data = httpx.get(f"{url}/v1/rollouts/slime-1", params={"format": "slime"}).json()["data"]
    samples = [SlimeSample.model_validate(sample) for sample in data]
    assert [s.tokens for s in samples] == [[*prompt2, *second], [*prompt3, *third]]
    assert [s.response_length for s in samples] == [len(prompt2) + len(second) - len(prompt1), len(third)]
    assert samples[0].loss_mask[:len(first)] == [1] * len(first) and samples[0].loss_mask[-len(second):] == \
        [1] * len(second)
    assert samples[1].loss_mask == [1] * len(third) and samples[1].response == "Fresh.<|im_end|>"
    assert samples[1].metadata["turns"][0]["non_monotonic"]
    assert samples[0].prompt == tokenizer.decode(prompt1)


def test_bulk_export_streams_ndjson_with_errors_in_line_and_can_delete(fake, url, tokenizer):
    for rollout_id in ("bulk-a", "bulk-b"):
        _episode(fake, url, tokenizer, rollout_id)
    with httpx.stream("POST", f"{url}/v1/rollouts/export", timeout=30,
                      json={"ids": ["bulk-a", "nope", "bulk-b"], "format": "verl", "delete": True}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/x-ndjson"
        lines = [orjson.loads(line) for line in response.iter_lines() if line]
    assert [line.get("extra_fields", {}).get("rollout_id") or line["id"] for line in lines] == \
        ["bulk-a", "nope", "bulk-b"]
    assert lines[1]["error"]["status"] == 404 and lines[1]["error"]["code"] == "rollout_not_found"
    for line in (lines[0], lines[2]):
        VerlAgentLoopOutput.model_validate(line)
    assert httpx.get(f"{url}/v1/rollouts/bulk-a").status_code == 410  # deleted once exported

    gateway_shape = httpx.post(f"{url}/v1/rollouts/export", json={"ids": ["nope"]})
    assert gateway_shape.status_code == 200 and orjson.loads(gateway_shape.content)["id"] == "nope"
    for bad, param, says in (({"ids": []}, "ids", "at least 1 item"), ({"ids": ["a"], "format": "trl"}, "format",
                              "'gateway', 'verl' or 'slime'"), ({"ids": "a"}, "ids", "expected an array"),
                             ({"ids": ["a"], "delete": "yes"}, "delete", "expected a boolean"),
                             ({"ids": ["a"], "fromat": "verl"}, "fromat", "Unknown parameter")):
        response = httpx.post(f"{url}/v1/rollouts/export", json=bad)
        assert response.status_code == 400 and response.json()["error"]["param"] == param
        assert says in response.json()["error"]["message"], response.json()
    assert httpx.get(f"{url}/v1/rollouts/x", params={"format": "trl"}).status_code == 400
