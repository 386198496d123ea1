"""A history no cache holds, made exact again from the ids its reasoning blobs carry.

The same scripted session runs twice against the real gateway: once with the session cache
warm, once with it emptied before every request and the echoed reasoning stripped of its
`content` (another gateway sharing the secret). Every prompt of the second run must be the
first run's, id for id, for Qwen3's template (which drops earlier reasoning once a new user
query comes) and for harmony. Generated ids are spelled one character per token where they
can be, so only the generated ids themselves reproduce them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator

import httpx
import pytest

from gateway.adapters.responses.input import parse_request
from gateway.core.settings import Settings
from gateway.formats.harmony.format import load_harmony_format
from gateway.server.app import build_runtime
from tests.codex.harness import GENERATE, answer_ids, call_ids, spelled
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.gateway_server import running_gateway
from tests.support.qwen3_tokens import END_THINK, THINK, ids

TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file.",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]
# The client's items between the model's turns: a user query, a tool output, a new user query.
Step = Callable[[list[dict]], list[dict]]


def user(text: str) -> Step:
    return lambda output: [{"type": "message", "role": "user", "content": text}]


def tool_output(text: str) -> Step:
    return lambda output: [{"type": "function_call_output", "call_id": output[-1]["call_id"], "output": text}]


def run(url: str, runtime, fake: FakeVLLM, key: str, steps: list[Step], generations: list[list[int]], *,
        forget: bool, alter: Callable[[list[dict]], None] | None = None) -> tuple[list[list[int]], dict]:
    """One session: each step's items, then the model's scripted turn. Returns the prompts and
    the last request body."""
    fake.requests.clear()
    fake.queue(*(Script(generated) for generated in generations))
    history: list[dict] = []
    output: list[dict] = []
    body: dict = {}
    for step in steps:
        history += step(output)
        if forget:
            runtime.store.sessions.discard(key)
            history = [{k: v for k, v in item.items() if not (item["type"] == "reasoning" and k == "content")}
                       for item in history]
        if alter is not None:
            alter(history)
        body = {"model": "m", "input": history, "tools": TOOLS, "prompt_cache_key": key}
        response = httpx.post(url + "/v1/responses", json=body, timeout=60)
        assert response.status_code == 200, response.text
        output = response.json()["output"]
        history = history + output
    return [b["token_ids"] for b in fake.bodies(GENERATE)], body


@pytest.fixture(scope="module")
def qwen(qwen_tokenizer_dir) -> Iterator[tuple[str, object, FakeVLLM]]:
    with FakeVLLM(model="m") as fake:
        settings = Settings(model=str(qwen_tokenizer_dir), upstreams=[fake.url], reasoning_secret="restore")
        runtime = build_runtime(settings)
        with running_gateway(settings, runtime) as url:
            yield url, runtime, fake


def thinking(tokenizer, thought: str) -> list[int]:
    return [THINK, *spelled(tokenizer, f"\n{thought}\n"), END_THINK, *ids(tokenizer, "\n\n")]


def qwen_session(tokenizer) -> tuple[list[Step], list[list[int]]]:
    steps = [user("Fix the test."), tool_output("def test(): assert add(1, 2) == 3"), user("And the docs?"),
             tool_output("# Docs")]
    generations = [
        thinking(tokenizer, "Read the test.") + call_ids(tokenizer, "read_file", {"path": "test.py"}, spell="test"),
        thinking(tokenizer, "It adds.") + spelled(tokenizer, "Fixed.") + answer_ids(tokenizer, ""),
        thinking(tokenizer, "Now the docs.") + call_ids(tokenizer, "read_file", {"path": "README.md"},
                                                        spell="README"),
        thinking(tokenizer, "They are fine.") + answer_ids(tokenizer, "The docs are fine."),
    ]
    return steps, generations


def test_qwen_prompts_after_cache_misses_are_the_warm_sessions(qwen, tokenizer):
    url, runtime, fake = qwen
    steps, generations = qwen_session(tokenizer)
    warm, _ = run(url, runtime, fake, "warm", steps, generations, forget=False)
    cold, _ = run(url, runtime, fake, "cold", steps, generations, forget=True)
    assert cold == warm
    p1, p2, p3, p4 = cold
    assert p2[:len(p1) + len(generations[0])] == p1 + generations[0]  # restored, not re-encoded
    assert p4[:len(p3) + len(generations[2])] == p3 + generations[2]
    # The new user query: Qwen3's template drops the earlier reasoning, and so does the prompt.
    assert "Read the test." not in tokenizer.decode(p3) and "Now the docs." in tokenizer.decode(p4)


def test_ids_that_do_not_decode_to_the_history_are_ignored_with_a_log(qwen, tokenizer, caplog):
    """The client changed the call the model made: its sealed ids no longer match it, so the turn
    is rendered from the history's items."""
    url, runtime, fake = qwen
    steps, generations = qwen_session(tokenizer)

    def edit(history: list[dict]) -> None:
        for item in history:
            if item["type"] == "function_call":
                item["arguments"] = json.dumps({"path": "other.py"})

    caplog.set_level(logging.WARNING, logger="gateway.tokenfix.restore")
    prompts, body = run(url, runtime, fake, "edited", steps[:2], generations[:2], forget=True, alter=edit)
    assert any("do not decode to the items" in r.getMessage() for r in caplog.records)
    chat_format = runtime.format
    assert prompts[1] == chat_format.render(parse_request(body).conversation)
    assert "other.py" in tokenizer.decode(prompts[1])


# -- harmony ------------------------------------------------------------------------------

START, END, MESSAGE, CHANNEL, CONSTRAIN, CALL, RETURN = 200006, 200007, 200008, 200005, 200003, 200012, 200002


@pytest.fixture(scope="module")
def harmony(o200k_dir) -> Iterator[tuple[str, object, FakeVLLM]]:
    from tests.support.o200k import harmony_tokenizer_dir

    with FakeVLLM(model="m") as fake:
        settings = Settings(model=str(harmony_tokenizer_dir()), upstreams=[fake.url], chat_format="harmony",
                            reasoning_secret="restore")
        runtime = build_runtime(settings)
        with running_gateway(settings, runtime) as url:
            yield url, runtime, fake


def harmony_session() -> tuple[list[Step], list[list[int]]]:
    encoding = load_harmony_format().encoding

    def enc(text: str) -> list[int]:
        return encoding.encode(text, disallowed_special=())

    def analysis(text: str) -> list[int]:
        spelled_text = [token for char in text for token in enc(char)]
        return [START, *enc("assistant"), CHANNEL, *enc("analysis"), MESSAGE, *spelled_text, END]

    def call(path: str) -> list[int]:
        return [START, *enc("assistant"), CHANNEL, *enc("commentary to=functions.read_file "), CONSTRAIN,
                *enc("json"), MESSAGE, *enc(json.dumps({"path": path})), CALL]

    def final(text: str) -> list[int]:
        return [START, *enc("assistant"), CHANNEL, *enc("final"), MESSAGE, *enc(text), RETURN]

    steps = [user("Fix the test."), tool_output("def test(): ..."), user("And the docs?"), tool_output("# Docs")]
    generations = [analysis("Read the test.") + call("test.py"), analysis("It adds.") + final("Fixed."),
                   analysis("Now the docs.") + call("README.md"), analysis("Fine.") + final("The docs are fine.")]
    return steps, [g[2:] for g in generations]  # the prompt ends with `<|start|>assistant`


def test_harmony_prompts_after_cache_misses_are_the_warm_sessions(harmony):
    url, runtime, fake = harmony
    steps, generations = harmony_session()
    warm, _ = run(url, runtime, fake, "warm", steps, generations, forget=False)
    cold, _ = run(url, runtime, fake, "cold", steps, generations, forget=True)
    assert cold == warm
    p1, p2 = cold[:2]
    assert p2[:len(p1) + len(generations[0])] == p1 + generations[0]
