"""Compaction (gateway/adapters/responses/compaction.py): `POST /v1/responses/compact` and a final
`compaction_trigger` item over HTTP, SSE and WebSocket, against a scripted vLLM.

The summary turn is the model's, through the ordinary pipeline: its prompt continues the
session's exact tokens (the earlier turn's non-canonical ids are in it) and ends with the
summary request. The answer is one sealed `compaction` item; sent back, it is the summary as a
user message, in a history rendered afresh (flagged non-monotonic), whose own turns are exact
again from there on.
"""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.sync.client import connect

from gateway.adapters.responses.compaction import SUMMARY_HEADER, SUMMARY_PROMPT
from gateway.adapters.responses.input import parse_request
from gateway.formats.hf.format import load_hf_format
from tests.codex.harness import answer_ids, spelled
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.sse import sse_events

MODEL = "m"
GENERATE = "/inference/v1/generate"
TERMINAL = ("response.completed", "response.failed", "response.incomplete")


pytestmark = pytest.mark.stack(served_model_name=MODEL)


@pytest.fixture(scope="module")
def chat_format(qwen_tokenizer_dir):
    return load_hf_format(qwen_tokenizer_dir)


def _post(stack, path: str, body: dict) -> httpx.Response:
    return httpx.post(stack.url + path, json={"model": MODEL, **body}, timeout=30)


def _non_monotonic(stack) -> float:
    for line in httpx.get(stack.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith('gateway_non_monotonic_prompts_total{api="responses_http"}'):
            return float(line.split()[-1])
    return 0.0


def _windows(tokens: list[int], size: int) -> list[list[int]]:
    return [tokens[i:i + size] for i in range(len(tokens) - size + 1)]


def _first_turn(stack, fake, tokenizer, key: str) -> tuple[list[dict], list[int]]:
    """A turn whose answer the model spelled one character per token (ids re-encoding never
    gives): the history after it, and the exact ids the model saw and wrote."""
    generated = [*spelled(tokenizer, "Noted: slate."), IM_END]
    fake.queue(Script(generated))
    history = [{"type": "message", "role": "user", "content": "Remember the code word: slate."}]
    answer = _post(stack, "/v1/responses", {"input": history, "prompt_cache_key": key})
    assert answer.status_code == 200, answer.text
    exact = [*fake.requests[-1].body["token_ids"], *generated]
    return [*history, *answer.json()["output"]], exact


def test_compaction_trigger_answers_one_compaction_item_from_a_summary_turn_on_the_exact_tokens(
        stack, fake, tokenizer, chat_format):
    history, exact = _first_turn(stack, fake, tokenizer, "compact-http")
    fake.queue(Script(answer_ids(tokenizer, "The code word is slate.")))
    answer = _post(stack, "/v1/responses", {"input": [*history, {"type": "compaction_trigger"}],
                                            "prompt_cache_key": "compact-http", "store": False})
    assert answer.status_code == 200, answer.text
    response = answer.json()
    (item,) = response["output"]
    assert item["type"] == "compaction" and item["id"].startswith("cmp_") and item["encrypted_content"]
    assert response["status"] == "completed"
    prompt = fake.requests[-1].body["token_ids"]
    assert prompt[:len(exact)] == exact  # the summary turn continues the model's own tokens
    tail = prompt[len(exact):]  # the summary request, rendered as the template renders it
    rendered = chat_format.render(parse_request(
        {"model": MODEL, "input": [*history, {"type": "message", "role": "user", "content": SUMMARY_PROMPT}]}
    ).conversation)
    assert rendered[-len(tail):] == tail and ids(tokenizer, SUMMARY_PROMPT)[:8] in _windows(tail, 8)
    assert response["usage"]["output_tokens"] == len(answer_ids(tokenizer, "The code word is slate."))


def test_the_compacted_history_is_a_new_exact_segment(stack, fake, tokenizer, chat_format):
    history, _ = _first_turn(stack, fake, tokenizer, "compact-segment")
    fake.queue(Script(answer_ids(tokenizer, "The code word is slate.")))
    compacted = _post(stack, "/v1/responses/compact", {"input": history, "prompt_cache_key": "compact-segment"}).json()
    assert [item["type"] for item in compacted["output"]] == ["message", "compaction"]
    assert compacted["output"][0]["content"] == [{"type": "input_text", "text": "Remember the code word: slate."}]

    # The next turn sends the compacted window: rendered afresh, with the summary as a user message.
    second = [*spelled(tokenizer, "slate"), IM_END]
    fake.queue(Script(second))
    before = _non_monotonic(stack)
    new_chain = [*compacted["output"], {"type": "message", "role": "user", "content": "The code word?"}]
    answer = _post(stack, "/v1/responses", {"input": new_chain, "prompt_cache_key": "compact-segment"})
    assert answer.status_code == 200, answer.text
    prompt = fake.requests[-1].body["token_ids"]
    expected = chat_format.render(parse_request({"model": MODEL, "input": [
        {"type": "message", "role": "user", "content": "Remember the code word: slate."},
        {"type": "message", "role": "user", "content": SUMMARY_HEADER + "The code word is slate."},
        {"type": "message", "role": "user", "content": "The code word?"}]}).conversation)
    assert prompt == expected
    assert _non_monotonic(stack) == before + 1  # the session's cached tokens did not continue it

    # From there on the turns are exact again: the model's spelled ids are in the next prompt.
    fake.queue(Script(answer_ids(tokenizer, "Done.")))
    third = [*new_chain, *answer.json()["output"], {"type": "message", "role": "user", "content": "Thanks."}]
    assert _post(stack, "/v1/responses", {"input": third, "prompt_cache_key": "compact-segment"}).status_code == 200
    assert fake.requests[-1].body["token_ids"][:len(prompt) + len(second)] == [*prompt, *second]


def test_compaction_trigger_streams_one_item(stack, fake, tokenizer):
    fake.queue(Script(answer_ids(tokenizer, "A summary.")))
    body = {"model": MODEL, "stream": True, "input": [
        {"type": "message", "role": "user", "content": "hello"}, {"type": "compaction_trigger"}]}
    with httpx.stream("POST", stack.url + "/v1/responses", json=body, timeout=30) as answer:
        events = sse_events(answer)
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "response.output_item.added",
                                          "response.output_item.done", "response.completed"]
    assert events[3]["item"]["type"] == "compaction" and events[-1]["response"]["output"] == [events[3]["item"]]


def test_compaction_trigger_over_websocket_after_a_continuation(stack, fake, tokenizer):
    first = [*spelled(tokenizer, "OK"), IM_END]
    fake.queue(Script(first), Script(answer_ids(tokenizer, "User said hi.")))
    with connect(stack.url.replace("http://", "ws://") + "/v1/responses") as socket:
        def turn(body: dict) -> list[dict]:
            socket.send(json.dumps({"type": "response.create", "model": MODEL, "store": False, **body}))
            events = []
            while not events or events[-1]["type"] not in (*TERMINAL, "error"):
                events.append(json.loads(socket.recv(timeout=30)))
            return events

        one = turn({"input": "hi"})[-1]["response"]
        compacted = turn({"previous_response_id": one["id"], "input": [{"type": "compaction_trigger"}]})
        after = turn({"previous_response_id": compacted[-1]["response"]["id"], "input": "go on"})
    assert [item["type"] for item in compacted[-1]["response"]["output"]] == ["compaction"]
    first_prompt, summary_prompt = (r.body["token_ids"] for r in fake.requests)
    assert summary_prompt[:len(first_prompt) + len(first)] == [*first_prompt, *first]
    # The summarized chain is not continued: what follows starts from the compacted window.
    assert after[-1]["type"] == "error" and after[-1]["error"]["code"] == "previous_response_not_found"


@pytest.mark.parametrize(("items", "code"), [
    ([{"type": "compaction_trigger"}, {"type": "message", "role": "user", "content": "x"}], "invalid_compaction_trigger"),
    ([{"type": "compaction", "encrypted_content": "bm90IGEgYmxvYg"}, {"type": "message", "role": "user", "content": "x"}],
     "invalid_encrypted_content"),
])
def test_malformed_compaction_items_are_refused(stack, fake, items, code):
    answer = _post(stack, "/v1/responses", {"input": items})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == code
    assert fake.requests == []


def test_compact_refuses_generation_options(stack, fake):
    answer = _post(stack, "/v1/responses/compact", {"input": "x", "temperature": 0.5})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "temperature"
    assert fake.requests == []


def test_a_summary_turn_that_only_thinks_and_calls_keeps_its_reasoning(stack, fake, tokenizer):
    """The tools stay offered in the summary turn; a model that answers with a call rather than a
    summary still leaves its reasoning as the summary."""
    from tests.codex.harness import call_ids
    from tests.support.qwen3_tokens import END_THINK, THINK

    thought = [THINK, *ids(tokenizer, "\nThe user wants the weather.\n"), END_THINK, *ids(tokenizer, "\n\n")]
    fake.queue(Script(thought + call_ids(tokenizer, "get_weather", {"city": "Paris"})))
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    compacted = _post(stack, "/v1/responses/compact", {"input": "Weather in Paris?", "tools": [tool],
                                                        "prompt_cache_retention": "24h"})
    assert compacted.status_code == 200, compacted.text
    item = compacted.json()["output"][-1]
    assert "<tools>" in tokenizer.decode(fake.requests[-1].body["token_ids"])  # still offered
    fake.queue(Script(answer_ids(tokenizer, "ok")))
    _post(stack, "/v1/responses", {"input": [item, {"type": "message", "role": "user", "content": "go"}]})
    assert SUMMARY_HEADER + "The user wants the weather." in tokenizer.decode(fake.requests[-1].body["token_ids"])
