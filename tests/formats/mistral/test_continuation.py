"""Exact multi-turn continuation on Mistral: the next prompt is the previous prompt, the model's own
ids (however it tokenized them, `</s>` included) and then only the encoder's render of the new items;
from the session cache, and from the reasoning blob alone when no cache holds the session. Also the
shared hypothesis check: the pipeline's prompt equals a full render spliced with the model's ids."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import assume, given

from gateway.core.errors import APIError
from tests.formats.mistral.test_parser import ids_of
from tests.support.fake_vllm import Script
from tests.support.mistral import EOS, tekken_file
from tests.support.stack import fake_stack
from tests.tokenfix.test_incremental import SETTINGS, both_ways, continuations

GENERATE = "/inference/v1/generate"
TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file.",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]


@SETTINGS
@given(case=continuations())
async def test_the_pipeline_prompt_equals_full_render_and_splice(mistral_format, case):
    try:
        _, _, ids, reference = await both_ways(mistral_format, case)
    except APIError:  # an order Mistral's encoder refuses (an empty answer, a lone tool result): a 400
        assume(False)
    assert ids == reference


@pytest.fixture(scope="module")
def stack():
    with fake_stack(tekken_file("v13"), served_model_name="m", reasoning_secret="restore") as running:
        yield running


def session(stack, generations: list[list[int]], *, forget: bool) -> list[list[int]]:
    """A user query, a call (with reasoning), its output, an answer; then a new query. The prompts sent."""
    stack.fake.requests.clear()
    stack.fake.queue(*(Script(ids) for ids in generations))
    history: list[dict] = [{"type": "message", "role": "user", "content": "Show pyproject."}]
    for step in range(len(generations)):
        if forget:
            stack.runtime.store.sessions.discard("k")
            history = [{k: v for k, v in item.items() if not (item["type"] == "reasoning" and k == "content")}
                       for item in history]
        body = {"model": "m", "input": history, "tools": TOOLS, "prompt_cache_key": "k", "store": False,
                "include": ["reasoning.encrypted_content"]}
        response = httpx.post(stack.url + "/v1/responses", json=body, timeout=60)
        assert response.status_code == 200, response.text
        output = response.json()["output"]
        history += output
        calls = [item for item in output if item["type"] == "function_call"]
        history += ([{"type": "function_call_output", "call_id": c["call_id"], "output": "[project]\nname='x'"}
                     for c in calls] or [{"type": "message", "role": "user", "content": f"Thanks {step}."}])
    return [body["token_ids"] for body in stack.fake.bodies(GENERATE)]


def test_the_next_prompts_continue_the_model_s_own_ids(stack, mistral_format):
    fmt = mistral_format
    # The model's own tokenization: one byte per token (no encoder makes it), compact JSON.
    call = [*ids_of(fmt, '[THINK]Read it.[/THINK][TOOL_CALLS]read_file[ARGS]{"path":"pyproject.toml"}',
                    split="bytes"), EOS]
    answer = [*ids_of(fmt, "[THINK]Done.[/THINK]It is named x.", split="bytes"), EOS]
    prompts = session(stack, [call, answer, answer], forget=False)
    assert prompts[1][:len(prompts[0]) + len(call)] == prompts[0] + call
    assert fmt.decode(prompts[1][len(prompts[0]) + len(call):]) == "[TOOL_RESULTS][project]\nname='x'[/TOOL_RESULTS]"
    assert prompts[2][:len(prompts[1]) + len(answer)] == prompts[1] + answer
    assert fmt.decode(prompts[2][len(prompts[1]) + len(answer):]) == "[INST]Thanks 1.[/INST]"
    # Without any cache, the reasoning blobs (each turn reasoned) bring back the same ids.
    assert session(stack, [call, answer, answer], forget=True) == prompts
