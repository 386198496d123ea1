"""Chat Completions fields a framework relies on: `stop` strings (matched by the gateway on
the streamed text, the generation aborted there, the turn cut at one token boundary) and
`logit_bias` (the model's token ids, passed through to vLLM)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.codex.harness import spelled
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids

GENERATE = "/inference/v1/generate"
MESSAGES = [{"role": "user", "content": "go"}]


pytestmark = pytest.mark.stack(served_model_name="m")


def _stream(stack, body: dict) -> list[dict]:
    with httpx.stream("POST", stack.url + "/v1/chat/completions", json={**body, "stream": True},
                      timeout=30) as response:
        return [json.loads(line[5:]) for line in response.iter_lines()
                if line.startswith("data:") and line[5:].strip() != "[DONE]"]


def test_a_stop_string_ends_the_turn_at_the_token_it_begins_in(stack, tokenizer):
    stack.reset()
    output = spelled(tokenizer, "Say ST, then STOP and more")
    stack.fake.queue(Script(output, logprobs=[-0.5] * len(output), hang=True))
    completion = stack.client().chat.completions.create(
        model="m", messages=MESSAGES, stop=["STOP", "never"], logprobs=True,
        extra_body={"return_token_ids": True})
    choice = completion.choices[0]
    kept = spelled(tokenizer, "Say ST, then ")
    assert choice.message.content == "Say ST, then " and choice.finish_reason == "stop"
    assert choice.model_extra["token_ids"] == kept
    assert len(choice.logprobs.content) == len(kept)
    assert completion.usage.completion_tokens == len(kept)
    assert len(stack.fake.aborted) == 1  # the generation was stopped upstream, not read to its end
    assert choice.model_extra["stop_reason"] == "STOP"  # which stop string, as vLLM's server says


def test_stop_reason_names_the_stop_id_or_nothing(stack, tokenizer):
    stack.reset()
    stack.fake.queue(Script(ids(tokenizer, "ok") + [IM_END]), Script(ids(tokenizer, "long"), finish_reason="length"))
    ended = httpx.post(stack.url + "/v1/chat/completions", json={"model": "m", "messages": MESSAGES},
                       timeout=30).json()["choices"][0]
    assert (ended["finish_reason"], ended["stop_reason"]) == ("stop", IM_END)
    cut = httpx.post(stack.url + "/v1/chat/completions", json={"model": "m", "messages": MESSAGES},
                     timeout=30).json()["choices"][0]
    assert (cut["finish_reason"], cut["stop_reason"]) == ("length", None)


def test_a_streamed_stop_string_never_shows_any_of_itself(stack, tokenizer):
    stack.reset()
    output = ids(tokenizer, "One two") + ids(tokenizer, " thr") + ids(tokenizer, "ee END") + [IM_END]
    stack.fake.queue(Script(output))
    chunks = _stream(stack, {"model": "m", "messages": MESSAGES, "stop": "three"})
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "One two"  # " thr" began the match: that token and all after are gone
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"][0]["stop_reason"] == "three"


def test_text_that_only_starts_like_a_stop_string_comes_through(stack, tokenizer):
    stack.reset()
    stack.fake.queue(Script(ids(tokenizer, "a STO b") + [IM_END]))
    chunks = _stream(stack, {"model": "m", "messages": MESSAGES, "stop": ["STOP"]})
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "a STO b" and stack.fake.aborted == []


def test_the_next_prompt_continues_the_cut_turn_exactly(stack, tokenizer):
    stack.reset()
    output = spelled(tokenizer, "ab|cd")
    stack.fake.queue(Script(output), Script(ids(tokenizer, "ok") + [IM_END]))
    body = {"model": "m", "messages": MESSAGES, "stop": "|", "prompt_cache_key": "cut"}
    first = httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=30).json()
    assert first["choices"][0]["message"]["content"] == "ab"
    history = [*MESSAGES, {"role": "assistant", "content": "ab"}, {"role": "user", "content": "more"}]
    httpx.post(stack.url + "/v1/chat/completions", json={**body, "messages": history}, timeout=30)
    prompts = [b["token_ids"] for b in stack.fake.bodies(GENERATE)]
    assert prompts[1][:len(prompts[0]) + 2] == prompts[0] + spelled(tokenizer, "ab")


@pytest.mark.parametrize(("stop", "param", "says"), [(["a"] * 5, "stop", "at most 4 items"),
                                                    ([""], "stop[0]", "at least 1 character"),
                                                    (3, "stop", "expected a string or an array")])
def test_bad_stop_values_are_400s(stack, stop, param, says):
    response = httpx.post(stack.url + "/v1/chat/completions",
                          json={"model": "m", "messages": MESSAGES, "stop": stop}, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == param
    assert says in response.json()["error"]["message"]


def test_logit_bias_reaches_vllm(stack, tokenizer):
    stack.reset()
    stack.fake.queue(Script(ids(tokenizer, "ok") + [IM_END]))
    stack.client().chat.completions.create(model="m", messages=MESSAGES, logit_bias={"9707": -100, "1879": 5})
    assert stack.fake.bodies(GENERATE)[-1]["sampling_params"]["logit_bias"] == {"9707": -100.0, "1879": 5.0}
    response = httpx.post(stack.url + "/v1/chat/completions",
                          json={"model": "m", "messages": MESSAGES, "logit_bias": {"x": 1}}, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == "logit_bias.x"


def test_n_fans_out_generations_of_one_prompt(stack, tokenizer):
    stack.reset()
    outputs = [ids(tokenizer, text) + [IM_END] for text in ("one", "two", "three")]
    stack.fake.queue(*(Script(output) for output in outputs))
    completion = stack.client().chat.completions.create(model="m", messages=MESSAGES, n=3,
                                                        extra_body={"return_token_ids": True})
    assert sorted(choice.message.content for choice in completion.choices) == ["one", "three", "two"]
    assert [choice.index for choice in completion.choices] == [0, 1, 2]
    assert sorted(map(tuple, (c.model_extra["token_ids"] for c in completion.choices))) == sorted(map(tuple, outputs))
    prompts = [body["token_ids"] for body in stack.fake.bodies(GENERATE)]
    assert len(prompts) == 3 and prompts[0] == prompts[1] == prompts[2]
    assert completion.usage.prompt_tokens == len(prompts[0])
    assert completion.usage.completion_tokens == sum(map(len, outputs))


def test_streamed_n_interleaves_the_choices_and_counts_the_prompt_once(stack, tokenizer):
    stack.reset()
    outputs = [ids(tokenizer, text) + [IM_END] for text in ("one two", "three four")]
    stack.fake.queue(*(Script(output, logprobs=[-1.0] * len(output)) for output in outputs))
    chunks = _stream(stack, {"model": "m", "messages": MESSAGES, "n": 2, "logprobs": True,
                             "stream_options": {"include_usage": True}})
    texts, ends, tokens = {}, {}, {}
    for chunk in chunks[:-1]:
        (choice,) = chunk["choices"]
        texts[choice["index"]] = texts.get(choice["index"], "") + (choice["delta"].get("content") or "")
        tokens[choice["index"]] = tokens.get(choice["index"], 0) + len((choice["logprobs"] or {}).get("content") or [])
        if choice["finish_reason"]:
            ends[choice["index"]] = (choice["finish_reason"], choice["stop_reason"])
    assert sorted(texts.values()) == ["one two", "three four"] and sorted(texts) == [0, 1]
    assert ends == {0: ("stop", IM_END), 1: ("stop", IM_END)}
    assert sorted(tokens.values()) == sorted(map(len, outputs))  # each choice's own tokens' logprobs
    prompt = stack.fake.bodies(GENERATE)[0]["token_ids"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == len(prompt)
    assert chunks[-1]["usage"]["completion_tokens"] == sum(map(len, outputs))


@pytest.mark.parametrize("fields", [{"n": 0}, {"n": 17}])
def test_n_it_cannot_serve_is_a_400(stack, fields):
    response = httpx.post(stack.url + "/v1/chat/completions",
                          json={"model": "m", "messages": MESSAGES, **fields}, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == "n"
