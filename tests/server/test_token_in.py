"""Token-in traffic — POST /v1/completions and /inference/v1/generate — passed through to a
replica as RL trainers send it, over the scripted fake vLLM: the replica gets the body as the
client wrote it, the client gets the replica's answer, and the gateway routes, fails over,
aborts and records the call in its rollout.

Request shapes are copied from the trainers' sources:
- TRL: trl/experimental/async_grpo/async_rollout_worker.py lines 780-796 (huggingface/trl at f2cd577)
- AReaL: areal/engine/vllm_remote.py lines 52-96 and 98-125 (inclusionAI/AReaL at 4aef98d)
- SkyRL: skyrl/backends/skyrl_train/inference_servers/remote_inference_client.py lines 486-507
  (NovaSky-AI/SkyRL at a956457)
"""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.waiting import wait_for

GENERATE, COMPLETIONS = "/inference/v1/generate", "/v1/completions"


pytestmark = pytest.mark.stack(replicas=2)


def served(stack, path):
    """The replica that took the last call on `path` and the body it got."""
    for fake in stack.fakes:
        if fake.bodies(path):
            return fake, fake.bodies(path)[-1]
    raise AssertionError(f"no replica got a call on {path}")


def trl_payload(prompt_ids):
    return {"model": "tiny-qwen3", "prompt": prompt_ids, "max_tokens": 16, "temperature": 1.0, "n": 1,
            "return_token_ids": True, "logprobs": 0}


def test_trl_completions_with_id_prompts(stack, fake, tokenizer):
    prompt = ids(tokenizer, "2+2=")
    generated = [*ids(tokenizer, "4"), IM_END]
    for each in stack.fakes:
        each.queue(Script(generated, logprobs=[-0.25, -0.5]))
    output = httpx.post(stack.url + COMPLETIONS, json=trl_payload(prompt), timeout=30).json()
    choice = output["choices"][0]
    assert (choice["token_ids"], choice["logprobs"]["token_logprobs"]) == (generated, [-0.25, -0.5])
    _, sent = served(stack, COMPLETIONS)
    assert sent["prompt"] == prompt and sent["return_token_ids"] is True and sent["logprobs"] == 0
    assert sent["request_id"].startswith("gw") and sent["model"] == "tiny-qwen3"


def test_areal_reads_ids_from_token_id_strings(stack, fake, tokenizer):
    generated = [*ids(tokenizer, "four"), IM_END]
    for each in stack.fakes:
        each.queue(Script(generated))
    payload = {"top_p": 1.0, "top_k": -1, "max_tokens": 8, "temperature": 0.0, "stop_token_ids": [IM_END],
               "ignore_eos": False, "skip_special_tokens": False, "return_tokens_as_token_ids": True,
               "logprobs": 0, "use_beam_search": False, "stream": False, "prompt": ids(tokenizer, "2+2=")}
    meta = httpx.post(stack.url + COMPLETIONS, json=payload, timeout=30).json()["choices"][0]
    assert [int(t.split(":")[1]) for t in meta["logprobs"]["tokens"]] == generated  # AReaL's parse
    _, sent = served(stack, COMPLETIONS)
    assert {k: v for k, v in sent.items() if k not in ("model", "request_id")} == payload  # untouched


def test_skyrl_generate_is_recorded_in_the_session_rollout_and_keeps_vllm_rl_fields(stack, fake, tokenizer):
    session = "skyrl-episode-1"
    first_prompt = ids(tokenizer, "Solve: 1+1")
    first, second = [*ids(tokenizer, " 2"), IM_END], [*ids(tokenizer, " done"), IM_END]
    for each in stack.fakes:
        each.queue(Script(first, logprobs=[-0.1] * len(first)), Script(second, logprobs=[-0.3] * len(second)))
    params = {"temperature": 1.0, "max_tokens": 8, "logprobs": 0}
    headers = {"X-Session-ID": session}
    one = httpx.post(stack.url + GENERATE, headers=headers, timeout=30, json={
        "sampling_params": params, "model": "tiny-qwen3", "token_ids": first_prompt}).json()
    replica, sent = served(stack, GENERATE)
    assert one["choices"][0]["token_ids"] == first
    assert one["choices"][0]["weight_versions"] == [{"version": "default", "start": 0, "end": len(first)}]  # as sent
    assert "routed_experts" in one["choices"][0] and "sampling_mask" in one["choices"][0]
    assert sent["token_ids"] == first_prompt and sent["sampling_params"] == params
    assert "rollout_id" not in sent

    second_prompt = [*first_prompt, *first, *ids(tokenizer, " next")]
    httpx.post(stack.url + GENERATE, headers=headers, timeout=30, json={
        "sampling_params": params, "model": "tiny-qwen3", "token_ids": second_prompt})
    assert replica.bodies(GENERATE)[-1]["token_ids"] == second_prompt  # the session stays on its replica
    rollout = httpx.get(f"{stack.url}/v1/rollouts/{session}").json()
    assert rollout["token_ids"] == [*second_prompt, *second]
    added = len(second_prompt) - len(first_prompt) - len(first)
    assert rollout["loss_mask"] == [0] * len(first_prompt) + [1] * len(first) + [0] * added + [1] * len(second)
    assert rollout["logprobs"][len(first_prompt):len(first_prompt) + len(first)] == [-0.1] * len(first)
    assert [t["segment"] for t in rollout["turns"]] == [0, 0]


def test_a_rollout_gets_ids_the_client_did_not_ask_for_without_the_client_seeing_them(stack, fake, tokenizer):
    prompt, generated = ids(tokenizer, "hi"), [*ids(tokenizer, "yo"), IM_END]
    for each in stack.fakes:
        each.queue(Script(generated))
    output = httpx.post(stack.url + COMPLETIONS, timeout=30, json={
        "prompt": prompt, "max_tokens": 4, "rollout_id": "plain-completions"}).json()
    assert output["choices"][0]["token_ids"] is None  # vLLM's answer without return_token_ids
    _, sent = served(stack, COMPLETIONS)
    assert sent["return_token_ids"] is True and "rollout_id" not in sent
    assert httpx.get(f"{stack.url}/v1/rollouts/plain-completions").json()["token_ids"] == [*prompt, *generated]


def test_streamed_events_pass_through_as_the_replica_sent_them(stack, fake, tokenizer):
    generated = [*ids(tokenizer, "a b c"), IM_END]
    for each in stack.fakes:
        each.queue(Script(generated))
    with httpx.stream("POST", stack.url + COMPLETIONS, timeout=30, json={
            **trl_payload(ids(tokenizer, "x")), "stream": True}) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    events = [orjson.loads(line[6:]) for line in lines[:-1]]
    assert [i for e in events if e["choices"] for i in e["choices"][0]["token_ids"]] == generated
    assert events[0]["choices"][0]["prompt_token_ids"] == ids(tokenizer, "x")


def test_a_replica_that_cannot_take_it_is_failed_over_before_the_first_token(stack, fake, tokenizer):
    generated = [*ids(tokenizer, "ok"), IM_END]
    session = "failover-session"
    first_url = stack.runtime.pool.pick(session).url  # the session's replica, which answers 503
    first, other = sorted(stack.fakes, key=lambda f: f.url != first_url)
    first.queue(Script([0], status=503))
    other.queue(Script(generated))
    output = httpx.post(stack.url + COMPLETIONS, json=trl_payload(ids(tokenizer, "y")), timeout=30,
                        headers={"X-Session-ID": session}).json()
    assert output["choices"][0]["token_ids"] == generated
    assert (len(first.bodies(COMPLETIONS)), len(other.bodies(COMPLETIONS))) == (1, 1)


def test_a_client_that_leaves_aborts_the_generation(stack, fake, tokenizer):
    for each in stack.fakes:
        each.queue(Script([*ids(tokenizer, "never ending")], hang=True))
    with httpx.stream("POST", stack.url + GENERATE, timeout=30, json={
            "sampling_params": {"max_tokens": 64}, "token_ids": ids(tokenizer, "go"), "stream": True}) as response:
        next(response.iter_lines())
    replica, _ = served(stack, GENERATE)
    wait_for(lambda: replica.disconnected, "the generation was aborted upstream")


def test_another_model_is_a_404(stack, fake):
    response = httpx.post(stack.url + COMPLETIONS, json={"model": "other", "prompt": [1, 2]}, timeout=30)
    assert response.status_code == 404 and response.json()["error"]["param"] == "model"


def test_a_token_in_session_and_a_chat_session_of_one_key_share_a_replica(stack, fake, tokenizer):
    """Token-in is prepared as every API's turn: its `session_id` is the session key a Chat call's
    `prompt_cache_key` is, so the same key lands on the same replica whichever API sends it."""
    generated = [*ids(tokenizer, "ok"), IM_END]
    homes = set()
    for i in range(8):
        key = f"shared-session-{i}"
        for each in stack.fakes:
            each.queue(Script(generated), Script(generated))
        httpx.post(stack.url + COMPLETIONS, timeout=30, json={**trl_payload(ids(tokenizer, f"{i}+{i}=")),
                                                                "session_id": key}).raise_for_status()
        token_in = next(each for each in stack.fakes if each.requests and each.requests[-1].path == COMPLETIONS)
        httpx.post(stack.url + "/v1/chat/completions", timeout=30, json={
            "model": "tiny-qwen3", "messages": [{"role": "user", "content": f"{i} and {i}?"}], "max_tokens": 4,
            "prompt_cache_key": key}).raise_for_status()
        chat = next(each for each in stack.fakes if each.requests and each.requests[-1].path != COMPLETIONS)
        assert chat is token_in, key
        homes.add(chat.url)
        for each in stack.fakes:
            each.reset()
    assert len(homes) == 2  # the keys spread over both replicas: agreeing is not an accident of one home
