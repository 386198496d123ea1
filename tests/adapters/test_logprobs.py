"""Logprobs as OpenAI's APIs show them, from the ids vLLM sampled: token text, bytes, and
the top alternatives, per `output_text` part on the Responses API (streamed in the delta
events) and per generated token on Chat Completions; vLLM is asked for them only when the
request asks."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_THINK, IM_END, THINK, ids

GENERATE = "/inference/v1/generate"


pytestmark = pytest.mark.stack(served_model_name="m")


def _scripted(tokenizer) -> tuple[Script, list[int]]:
    """Thinking, then "Hi é!" whose "é" is spelled as its two byte tokens."""
    e_acute = tokenizer.convert_tokens_to_ids(["Ã", "©"])  # byte-level BPE's 0xC3, 0xA9
    text = ids(tokenizer, "Hi ") + e_acute + ids(tokenizer, "!")
    output = [THINK, *ids(tokenizer, "\nhm\n"), END_THINK, *ids(tokenizer, "\n\n"), *text, IM_END]
    logprobs = [-0.1 * (i + 1) for i in range(len(output))]
    top = [[(token, logprobs[i]), (9707, -5.0)] for i, token in enumerate(output)]
    return Script(output, logprobs=logprobs, top_logprobs=top, chunks=[1] * len(output)), text


def test_responses_include_logprobs_streams_them_per_output_text_part(stack, tokenizer):
    stack.reset()
    script, text = _scripted(tokenizer)
    stack.fake.queue(script)
    body = {"model": "m", "input": "hi", "stream": True, "include": ["message.output_text.logprobs"],
            "top_logprobs": 2}
    with httpx.stream("POST", stack.url + "/v1/responses", json=body, timeout=30) as response:
        events = [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    streamed = [entry for delta in deltas for entry in delta["logprobs"]]
    first = script.token_ids.index(text[0])
    positions = range(first, first + len(text))
    assert [entry["logprob"] for entry in streamed] == [script.logprobs[p] for p in positions]
    assert [entry["bytes"] for entry in streamed[-3:-1]] == [[0xC3], [0xA9]]
    assert [entry["token"] for entry in streamed[-3:-1]] == ["\ufffd", "\ufffd"]  # part of a character each
    assert bytes(b for entry in streamed for b in entry["bytes"]).decode() == "Hi é!"
    assert streamed[0]["token"] == "Hi" and streamed[1]["token"] == " " and streamed[-1]["token"] == "!"
    assert [alt["logprob"] for alt in streamed[0]["top_logprobs"]] == [script.logprobs[first], -5.0]
    assert streamed[0]["top_logprobs"][1]["token"] == "Hello"
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert done["logprobs"] == streamed
    final = events[-1]["response"]["output"][-1]["content"][0]
    assert final["logprobs"] == streamed
    assert stack.fake.bodies(GENERATE)[-1]["sampling_params"]["logprobs"] == 2


def test_responses_without_include_asks_vllm_for_no_logprobs(stack, tokenizer):
    stack.reset()
    stack.fake.queue(Script(ids(tokenizer, "ok") + [IM_END]))
    response = httpx.post(stack.url + "/v1/responses", json={"model": "m", "input": "hi"}, timeout=30).json()
    assert response["output"][0]["content"][0]["logprobs"] == []
    assert "logprobs" not in stack.fake.bodies(GENERATE)[-1]["sampling_params"]


def test_chat_logprobs_have_token_text_bytes_and_alternatives(stack, tokenizer):
    stack.reset()
    script, _ = _scripted(tokenizer)
    stack.fake.queue(script)
    completion = stack.client().chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], logprobs=True, top_logprobs=2)
    content = completion.choices[0].logprobs.content
    assert [entry.logprob for entry in content] == script.logprobs
    assert [entry.token for entry in content][:1] == ["<think>"]
    assert bytes(b for entry in content for b in entry.bytes).decode() == tokenizer.decode(script.token_ids)
    assert [[alt.logprob for alt in entry.top_logprobs] for entry in content] == [[lp, -5.0] for lp in script.logprobs]
    assert stack.fake.bodies(GENERATE)[-1]["sampling_params"]["logprobs"] == 2


def test_streamed_chat_logprobs_come_with_each_chunk_for_its_own_tokens(stack, tokenizer):
    stack.reset()
    script, _ = _scripted(tokenizer)
    stack.fake.queue(script)
    stream = stack.client().chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], logprobs=True, top_logprobs=2, stream=True)
    chunks = [chunk for chunk in stream if chunk.choices]
    entries = [(chunk.choices[0].delta, chunk.choices[0].logprobs.content) for chunk in chunks
               if chunk.choices[0].logprobs is not None]
    # Every generated token once, in order, with its own text, bytes and alternatives…
    content = [entry for _, part in entries for entry in part]
    assert [entry.logprob for entry in content] == script.logprobs
    assert bytes(b for entry in content for b in entry.bytes).decode() == tokenizer.decode(script.token_ids)
    assert [[alt.logprob for alt in entry.top_logprobs] for entry in content] == [[lp, -5.0] for lp in script.logprobs]
    # …each on the chunk whose text it wrote; markup (and the reasoning's held-back last newline) with the
    # text after it.
    answer = [part for delta, part in entries if delta.content]
    assert bytes(b for part in answer for entry in part for b in entry.bytes).decode() == "\n</think>\n\nHi é!"
    assert "".join(delta.content or "" for delta, _ in entries) == "Hi é!"
    assert [entry.token for entry in entries[-1][1]] == ["<|im_end|>"]  # the stop id comes with the last chunk
    assert chunks[-1].choices[0].finish_reason == "stop"
