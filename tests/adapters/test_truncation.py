"""Responses `truncation: "auto"`: a history too long for the context window loses its oldest
exchanges until it fits (OpenAI's rule), instead of the 400 `"disabled"` (the default) gives."""

from __future__ import annotations

import httpx
import pytest

from tests.codex.harness import answer_ids
from tests.support.fake_vllm import Script

GENERATE = "/inference/v1/generate"
LONG = "word " * 150  # ~150 tokens


pytestmark = pytest.mark.stack(fake={"max_model_len": 512}, served_model_name="m")


def _history(turns: int) -> list[dict]:
    items = []
    for i in range(turns):
        items += [{"role": "user", "content": f"question {i}: {LONG}"},
                  {"role": "assistant", "content": f"answer {i}"}]
    return [*items, {"role": "user", "content": "and now?"}]


def _respond(stack, **fields) -> httpx.Response:
    return httpx.post(stack.url + "/v1/responses", timeout=30, json={
        "model": "m", "instructions": "Be brief.", "input": _history(4), "max_output_tokens": 32, **fields})


def test_auto_drops_the_oldest_exchanges_until_the_history_fits(stack, tokenizer):
    stack.reset()
    stack.fake.queue(Script(answer_ids(tokenizer, "ok")))
    response = _respond(stack, truncation="auto")
    assert response.status_code == 200, response.text
    assert response.json()["truncation"] == "auto"
    prompt = stack.fake.bodies(GENERATE)[-1]["token_ids"]
    text = tokenizer.decode(prompt)
    assert len(prompt) + 32 <= 512
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>")  # the instructions stay
    assert "question 0" not in text and "question 3" in text and text.rstrip().endswith(
        "<|im_start|>user\nand now?<|im_end|>\n<|im_start|>assistant")
    assert "question 2" not in text or "question 1" not in text  # only whole exchanges, oldest first


def test_disabled_is_a_400_and_auto_cannot_drop_the_last_user_turn(stack, tokenizer):
    stack.reset()
    refused = _respond(stack)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    alone = httpx.post(stack.url + "/v1/responses", timeout=30, json={
        "model": "m", "input": LONG * 4, "truncation": "auto", "max_output_tokens": 32})
    assert alone.status_code == 400 and alone.json()["error"]["code"] == "context_length_exceeded"
    bad = _respond(stack, truncation="sometimes")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "truncation"
    assert stack.fake.bodies(GENERATE) == []


def test_a_truncated_turn_leaves_no_session_to_splice_onto_the_full_history(stack, tokenizer):
    stack.reset()
    stack.fake.queue(Script(answer_ids(tokenizer, "ok")), Script(answer_ids(tokenizer, "fine")))
    assert _respond(stack, truncation="auto", prompt_cache_key="t").status_code == 200
    history = [*_history(4)[:-1], {"role": "user", "content": "and now?"}, {"role": "assistant", "content": "ok"},
               {"role": "user", "content": "more?"}]
    again = httpx.post(stack.url + "/v1/responses", timeout=30, json={
        "model": "m", "instructions": "Be brief.", "input": history, "max_output_tokens": 32,
        "truncation": "auto", "prompt_cache_key": "t"})
    assert again.status_code == 200, again.text
    prompt = stack.fake.bodies(GENERATE)[-1]["token_ids"]
    text = tokenizer.decode(prompt)
    assert len(prompt) + 32 <= 512 and text.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert text.endswith("and now?<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n"
                         "<|im_start|>user\nmore?<|im_end|>\n<|im_start|>assistant\n")
