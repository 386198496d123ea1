"""POST /tokenize and /detokenize in vLLM's shapes, over the scripted fake vLLM: for a
conversation, the tokens are the prompt the gateway sends (exact ids spliced in).

NeMo-Gym's fallback for the prompt's ids (NVIDIA-NeMo/Gym responses_api_models/vllm_model/
app.py lines 770-783 at 07d6b0d) posts the call's `model`, `messages`, `tools` and
`chat_template_kwargs` (`_TOKENIZE_CHAT_FIELDS`, lines 236-243) to the server's root
`/tokenize` (nemo_gym/openai_utils.py lines 942-951) and takes `tokens` as the prompt.
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids

GENERATE = "/inference/v1/generate"
TOOLS = [{"type": "function", "function": {"name": "exec_command", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}}}}]


def chat(url, messages, **extra):
    response = httpx.post(url + "/v1/chat/completions", timeout=30,
                          json={"model": "tiny-qwen3", "messages": messages, "tools": TOOLS, **extra})
    assert response.status_code == 200, response.text
    return response.json()


def tokenize(url, **body):
    response = httpx.post(url + "/tokenize", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def odd_hello(tokenizer):
    """"Hello there." as the model might sample it: pieces a re-tokenization would merge."""
    generated = [*ids(tokenizer, "Hel"), *ids(tokenizer, "lo"), *ids(tokenizer, " there."), IM_END]
    assert tokenizer.decode(generated[:-1]) == "Hello there." and generated[:-1] != ids(tokenizer, "Hello there.")
    return generated


def test_a_first_call_tokenizes_to_the_prompt_sent(stack, fake):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    chat(stack.url, messages)
    answer = tokenize(stack.url, model="tiny-qwen3", messages=messages, tools=TOOLS)
    assert answer["tokens"] == fake.bodies(GENERATE)[-1]["token_ids"]
    assert answer["count"] == len(answer["tokens"]) and answer["max_model_len"] == 32768


def test_nemo_gym_fallback_gets_the_spliced_prompt_not_a_fresh_render(stack, fake, tokenizer):
    """Turn 2 carries turn 1's ids on its assistant message (NeMo-RL's convention): the prompt
    sent splices them in, and /tokenize of the same body answers exactly that prompt."""
    generated = odd_hello(tokenizer)
    fake.queue(Script(generated), Script([*ids(tokenizer, "Bye."), IM_END]))
    messages = [{"role": "user", "content": "hi"}]
    first = chat(stack.url, messages, return_token_ids=True)
    prompt1 = fake.bodies(GENERATE)[-1]["token_ids"]
    messages += [{"role": "assistant", "content": first["choices"][0]["message"]["content"],
                  "prompt_token_ids": prompt1, "generation_token_ids": generated},
                 {"role": "user", "content": "again"}]
    chat(stack.url, messages, logprobs=True, top_logprobs=0, return_tokens_as_token_ids=True)
    prompt2 = fake.bodies(GENERATE)[-1]["token_ids"]
    assert prompt2[:len(prompt1) + len(generated)] == [*prompt1, *generated]  # spliced
    gym_body = {"model": "tiny-qwen3", "messages": messages, "tools": TOOLS}  # _TOKENIZE_CHAT_FIELDS
    assert tokenize(stack.url, **gym_body)["tokens"] == prompt2
    plain = [{k: v for k, v in m.items() if not k.endswith("_ids")} for m in messages]
    assert tokenize(stack.url, model="tiny-qwen3", messages=plain, tools=TOOLS)["tokens"] != prompt2  # a fresh render


@pytest.mark.parametrize("key", ["rollout_id", "prompt_cache_key"])
def test_the_call_just_made_tokenizes_to_its_prompt(stack, fake, tokenizer, key):
    """A rollout's or a session's conversation asked about again: the prompt of the call that
    generated from it (exact ids and all), not a re-render of the history."""
    name = f"tok-{key}"
    fake.queue(Script(odd_hello(tokenizer)), Script([*ids(tokenizer, "Bye."), IM_END]))
    messages = [{"role": "user", "content": "hi"}]
    first = chat(stack.url, messages, **{key: name})
    messages += [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                 {"role": "user", "content": "again"}]
    chat(stack.url, messages, **{key: name})
    sent = fake.bodies(GENERATE)[-1]["token_ids"]
    assert tokenize(stack.url, messages=messages, tools=TOOLS, **{key: name})["tokens"] == sent
    assert tokenize(stack.url, messages=messages, tools=TOOLS)["tokens"] != sent


def test_text_is_tokenized_by_a_replica(stack, fake):
    answer = tokenize(stack.url, prompt="hi", return_token_strs=True)
    assert answer["tokens"] == [ord("h"), ord("i")] and answer["token_strs"] == ["h", "i"]  # the fake's ids
    assert fake.bodies("/tokenize")[-1] == {"model": "tiny-qwen3", "prompt": "hi", "add_special_tokens": True,
                                            "return_token_strs": True}


def test_token_strs_and_detokenize(stack, fake, tokenizer):
    answer = tokenize(stack.url, messages=[{"role": "user", "content": "héllo"}], return_token_strs=True)
    assert "".join(answer["token_strs"]) == tokenizer.decode(answer["tokens"])
    detokenized = httpx.post(stack.url + "/detokenize", json={"model": "tiny-qwen3", "tokens": answer["tokens"]})
    assert detokenized.json() == {"prompt": tokenizer.decode(answer["tokens"])}


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": "x", "messages": [{"role": "user", "content": "x"}]}, "messages"),
    ({}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": False}, "add_generation_prompt"),
    ({"messages": [{"role": "user", "content": "x"}], "continue_final_message": True}, "continue_final_message"),
    ({"prompt": "x", "tools": TOOLS}, "tools"),
    ({"prompt": "x", "model": "other"}, "model"),
    ({"tokens": [1]}, "tokens"),
])
def test_bad_bodies_are_400s_naming_the_field(stack, fake, body, param):
    response = httpx.post(stack.url + "/tokenize", json=body, timeout=30)
    assert response.status_code in (400, 404), response.text
    assert response.json()["error"]["param"] == param
