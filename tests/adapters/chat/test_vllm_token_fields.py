"""vLLM's token fields and extra request fields on Chat Completions, as RL frameworks send
them to a stock vLLM server, over the scripted fake vLLM.

NeMo-Gym's `vllm_model` (NVIDIA-NeMo/Gym responses_api_models/vllm_model/app.py, lines 477-489
at 07d6b0d) adds `logprobs: true, top_logprobs: 0, return_tokens_as_token_ids: true` (and
`return_token_ids: true` with `request_prompt_and_generation_token_ids`) to every request, then
reads each generated id back from `logprobs.content[].token` as "token_id:N" (lines 887-917) and
checks them against `choices[0].token_ids` and the message-level bundle (lines 745-790).
"""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, TOOL_CALL, ids
from tests.support.stack import fake_stack

GENERATE = "/inference/v1/generate"
NEMO_GYM = {"logprobs": True, "top_logprobs": 0, "return_tokens_as_token_ids": True}
TOOLS = [{"type": "function", "function": {"name": "exec_command", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}}}}]


def post(url, **body):
    return httpx.post(url + "/v1/chat/completions", timeout=30,
                      json={"model": "tiny-qwen3", "messages": [{"role": "user", "content": "hi"}], **body})


def test_nemo_gym_reads_every_generated_id_from_the_logprobs_tokens(stack, fake, tokenizer):
    generated = [TOOL_CALL, *ids(tokenizer, '\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n'),
                 END_TOOL_CALL, IM_END]
    logprobs = [-0.5 - i / 100 for i in range(len(generated))]
    fake.queue(Script(generated, logprobs=logprobs, stop_reason=IM_END))
    body = post(stack.url, tools=TOOLS, return_token_ids=True, **NEMO_GYM).json()
    choice = body["choices"][0]
    content = choice["logprobs"]["content"]
    assert [entry["token"] for entry in content] == [f"token_id:{t}" for t in generated]
    assert [entry["logprob"] for entry in content] == logprobs
    assert all(entry["top_logprobs"] == [] for entry in content)  # top_logprobs: 0
    assert content[0]["bytes"] == list(tokenizer.decode([generated[0]]).encode())  # bytes stay the token's
    # the three places NeMo-Gym cross-checks agree
    sent = fake.bodies(GENERATE)[-1]
    assert body["prompt_token_ids"] == sent["token_ids"] == choice["message"]["prompt_token_ids"]
    assert choice["token_ids"] == generated == choice["message"]["generation_token_ids"]
    assert choice["message"]["generation_log_probs"] == logprobs
    assert sent["sampling_params"]["logprobs"] == 0


def test_alternatives_are_named_by_id_too(stack, fake, tokenizer):
    generated = [*ids(tokenizer, "Hello"), IM_END]
    fake.queue(Script(generated, top_logprobs=[[(t, -0.1), (7, -2.0)] for t in generated]))
    content = post(stack.url, logprobs=True, top_logprobs=2,
                   return_tokens_as_token_ids=True).json()["choices"][0]["logprobs"]["content"]
    assert [[alt["token"] for alt in entry["top_logprobs"]] for entry in content] == [
        [f"token_id:{t}", "token_id:7"] for t in generated]
    plain = post(stack.url, logprobs=True).json()["choices"][0]["logprobs"]["content"]
    assert plain[0]["token"] != f"token_id:{generated[0]}"


def test_streamed_ids_come_per_chunk_and_the_prompt_on_the_first(stack, fake, tokenizer):
    """rLLM's model gateway reads `prompt_token_ids` off the first chunk and appends each
    chunk's `token_ids` (rllm_model_gateway/data_process.py)."""
    generated = [*ids(tokenizer, "One two three four"), IM_END]
    fake.queue(Script(generated))
    with httpx.stream("POST", stack.url + "/v1/chat/completions", timeout=30, json={
            "model": "tiny-qwen3", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "return_token_ids": True}) as response:
        chunks = [orjson.loads(line[6:]) for line in response.iter_lines()
                  if line.startswith("data: {")]
    assert chunks[0]["prompt_token_ids"] == fake.bodies(GENERATE)[-1]["token_ids"]
    assert all("prompt_token_ids" not in chunk for chunk in chunks[1:])
    per_chunk = [c["choices"][0]["token_ids"] for c in chunks if c["choices"] and "token_ids" in c["choices"][0]]
    assert [i for ids in per_chunk for i in ids] == generated
    text_chunks = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert text_chunks and all(tokenizer.decode(c["token_ids"]) == c["delta"]["content"] for c in text_chunks)


def test_vllm_sampling_extras_reach_the_replica(stack, fake):
    post(stack.url, min_tokens=2, stop_token_ids=[42, IM_END], cache_salt="salt", priority=-3, max_tokens=5)
    sent = fake.bodies(GENERATE)[-1]
    params = sent["sampling_params"]
    assert params["min_tokens"] == 2
    assert params["stop_token_ids"][-1] == 42 and IM_END in params["stop_token_ids"]
    assert len(params["stop_token_ids"]) == len(set(params["stop_token_ids"]))
    assert (sent["cache_salt"], sent["priority"]) == ("salt", -3)
    assert "cache_salt" not in params and "priority" not in params and "ignore_eos" not in params

    post(stack.url, ignore_eos=True, stop_token_ids=[42])
    params = fake.bodies(GENERATE)[-1]["sampling_params"]
    assert params["ignore_eos"] is True and params["stop_token_ids"] == [42]  # vLLM's rule: the request's only


@pytest.mark.parametrize(("extra", "param"), [
    ({"skip_special_tokens": False}, "skip_special_tokens"),
    ({"include_stop_str_in_output": True, "stop": ["x"]}, "include_stop_str_in_output"),
    ({"prompt_logprobs": 1}, "prompt_logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"min_tokens": 9, "max_tokens": 4}, "min_tokens"),
    ({"bad_words": ["x"]}, "bad_words"),
])
def test_what_cannot_be_honoured_is_a_400_naming_it(stack, fake, extra, param):
    response = post(stack.url, **extra)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert fake.bodies(GENERATE) == []


def test_accepted_values_that_change_nothing(stack, fake):
    for extra in ({"skip_special_tokens": True}, {"include_stop_str_in_output": True}, {"top_logprobs": 0}):
        assert post(stack.url, **extra).status_code == 200


def test_the_server_flag_names_tokens_by_id_unless_a_request_says_not_to(qwen_tokenizer_dir, tokenizer):
    with fake_stack(qwen_tokenizer_dir, served_model_name="tiny-qwen3", return_tokens_as_token_ids=True) as stack:
        generated = [*ids(tokenizer, "Hi"), IM_END]
        stack.fake.queue(Script(generated), Script(generated))
        content = post(stack.url, logprobs=True).json()["choices"][0]["logprobs"]["content"]
        assert [entry["token"] for entry in content] == [f"token_id:{t}" for t in generated]
        content = post(stack.url, logprobs=True,
                       return_tokens_as_token_ids=False).json()["choices"][0]["logprobs"]["content"]
        assert content[0]["token"] == tokenizer.decode([generated[0]])


def test_a_literal_extra_body_is_read_as_the_fields_it_stands_for(stack, fake, tokenizer):
    """rLLM's model gateway (rllm_model_gateway/middleware.py) puts `extra_body` into the JSON
    itself; vLLM would ignore it, the gateway reads its fields (the body's own win)."""
    generated = [*ids(tokenizer, "Hi"), IM_END]
    fake.queue(Script(generated))
    body = post(stack.url, extra_body={"return_token_ids": True, "max_tokens": 9}, max_tokens=5).json()
    assert body["choices"][0]["token_ids"] == generated
    assert fake.bodies(GENERATE)[-1]["sampling_params"]["max_tokens"] == 5
