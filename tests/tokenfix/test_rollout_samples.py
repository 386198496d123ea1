"""GRPO-style sampling on a rollout, over the scripted fake vLLM: Chat `n` > 1 with a
`rollout_id` records each sample in its own branch `{rollout_id}:{i}`, a copy of the rollout
so far plus that sample, exact, continuable and exported as its own trajectory."""

from __future__ import annotations

import json

import httpx

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.trainer_shapes import VerlAgentLoopOutput

GENERATE = "/inference/v1/generate"
QUESTION = [{"role": "user", "content": "2+2?"}]


def chat(stack, messages, **extra):
    return httpx.post(stack.url + "/v1/chat/completions", timeout=30,
                      json={"model": "tiny-qwen3", "messages": messages, **extra})


def test_n_samples_of_a_new_rollout_are_n_exact_trajectories(stack, tokenizer):
    stack.reset()
    answers = {text: [*ids(tokenizer, text), IM_END] for text in ("four", "4", "five")}
    stack.fake.queue(*(Script(output, logprobs=[-0.25] * len(output)) for output in answers.values()))
    body = chat(stack, QUESTION, rollout_id="q7", n=3).json()
    prompt = stack.fake.bodies(GENERATE)[0]["token_ids"]
    assert all(b["token_ids"] == prompt for b in stack.fake.bodies(GENERATE))  # one prompt, three samples
    assert [c["rollout_id"] for c in body["choices"]] == ["q7:0", "q7:1", "q7:2"]
    for choice in body["choices"]:
        output = answers[choice["message"]["content"]]
        trajectory = httpx.get(f"{stack.url}/v1/rollouts/{choice['rollout_id']}").json()
        assert trajectory["token_ids"] == [*prompt, *output]
        assert trajectory["loss_mask"] == [0] * len(prompt) + [1] * len(output)
        assert trajectory["logprobs"][len(prompt):] == [-0.25] * len(output)
        assert trajectory["turns"][0]["stop_reason"] == IM_END
    assert httpx.get(f"{stack.url}/v1/rollouts/q7").status_code == 404  # only the samples are trajectories


def test_a_branch_continues_exactly_and_samples_mid_rollout_copy_the_rollout_so_far(stack, tokenizer):
    stack.reset()
    first, a, b, more = ([*ids(tokenizer, text), IM_END] for text in ("Let me think", "A", "B", "done"))
    stack.fake.queue(Script(first), Script(a), Script(b), Script(more))
    one = chat(stack, QUESTION, rollout_id="ep").json()["choices"][0]["message"]["content"]
    history = [*QUESTION, {"role": "assistant", "content": one}, {"role": "user", "content": "answer"}]
    samples = chat(stack, history, rollout_id="ep", n=2).json()["choices"]
    prompts = [body["token_ids"] for body in stack.fake.bodies(GENERATE)]
    assert prompts[1][:len(prompts[0]) + len(first)] == [*prompts[0], *first]  # spliced on the rollout's ids
    chosen = next(c for c in samples if c["message"]["content"] == "B")
    history += [{"role": "assistant", "content": "B"}, {"role": "user", "content": "sure?"}]
    assert chat(stack, history, rollout_id=chosen["rollout_id"]).status_code == 200
    prompts = [body["token_ids"] for body in stack.fake.bodies(GENERATE)]
    assert prompts[3][:len(prompts[1]) + len(b)] == [*prompts[1], *b]  # the branch continues its own sample
    trajectory = httpx.get(f"{stack.url}/v1/rollouts/{chosen['rollout_id']}").json()
    assert len(trajectory["turns"]) == 3 and len(trajectory["segments"]) == 1
    assert trajectory["token_ids"] == [*prompts[3], *more]
    generated = [i for i, m in enumerate(trajectory["loss_mask"]) if m]
    assert [trajectory["token_ids"][i] for i in generated] == [*first, *b, *more]
    other = next(c for c in samples if c["message"]["content"] == "A")["rollout_id"]
    assert httpx.get(f"{stack.url}/v1/rollouts/{other}").json()["token_ids"] == [*prompts[1], *a]
    assert len(httpx.get(f"{stack.url}/v1/rollouts/ep").json()["turns"]) == 1  # the parent is as it was
    verl = httpx.get(f"{stack.url}/v1/rollouts/{other}?format=verl").json()["data"]
    assert [VerlAgentLoopOutput(**sample).num_turns for sample in verl] == [2]


def test_sampling_into_existing_branches_is_a_409(stack, tokenizer):
    stack.reset()
    stack.fake.queue(*(Script([*ids(tokenizer, "x"), IM_END]) for _ in range(2)))
    assert chat(stack, QUESTION, rollout_id="twice", n=2).status_code == 200
    again = chat(stack, QUESTION, rollout_id="twice", n=2)
    assert again.status_code == 409 and again.json()["error"]["code"] == "rollout_branch_exists"
    assert "twice:0" in again.json()["error"]["message"]


def test_streamed_samples_name_their_branches_and_are_recorded(stack, tokenizer):
    stack.reset()
    outputs = {text: [*ids(tokenizer, text), IM_END] for text in ("yes", "no")}
    stack.fake.queue(*(Script(output) for output in outputs.values()))
    with httpx.stream("POST", stack.url + "/v1/chat/completions", timeout=30, json={
            "model": "tiny-qwen3", "messages": QUESTION, "rollout_id": "s", "n": 2, "stream": True}) as response:
        chunks = [json.loads(line[5:]) for line in response.iter_lines()
                  if line.startswith("data:") and line[5:].strip() != "[DONE]"]
    branches = {c["choices"][0]["index"]: c["choices"][0]["rollout_id"] for c in chunks
                if "rollout_id" in c["choices"][0]}
    assert branches == {0: "s:0", 1: "s:1"}
    texts = {}
    for chunk in chunks:
        choice = chunk["choices"][0]
        texts[choice["index"]] = texts.get(choice["index"], "") + (choice["delta"].get("content") or "")
    prompt = stack.fake.bodies(GENERATE)[0]["token_ids"]
    for index, branch in branches.items():
        trajectory = httpx.get(f"{stack.url}/v1/rollouts/{branch}").json()
        assert trajectory["token_ids"] == [*prompt, *outputs[texts[index]]]
