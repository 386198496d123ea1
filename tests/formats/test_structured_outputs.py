"""Forced and structured output reaches vLLM as its own structured outputs, spelled in the
model's output syntax with its markers as token ids (a structural tag), on both token
endpoints; what cannot be enforced answers 400 instead of being accepted and ignored. (That
these tags accept the model's native output and nothing else was checked with xgrammar 0.2.8,
vLLM 0.32's; tests/real_vllm/test_fidelity.py runs them in real vLLM.)"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.codex.harness import call_ids
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_THINK, END_TOOL_CALL, IM_END, THINK, TOOL_CALL, ids
from tests.support.stack import fake_stack

GENERATE, COMPLETIONS = "/inference/v1/generate", "/v1/completions"
PARAMS = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}
TOOLS = [{"type": "function", "name": "exec_command", "parameters": PARAMS},
         {"type": "function", "name": "read_file", "parameters": {"type": "object"}}]
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}} for tool in TOOLS]
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


pytestmark = pytest.mark.stack(served_model_name="m")


def _tag(stack, path: str = GENERATE) -> dict | None:
    body = stack.fake.bodies(path)[-1]
    structured = (body["sampling_params"] if path == GENERATE else body).get("structured_outputs")
    return json.loads(structured["structural_tag"])["format"] if structured else None


def _responses(stack, tokenizer, **fields) -> httpx.Response:
    stack.reset()
    stack.fake.queue(Script(call_ids(tokenizer, "exec_command", {"cmd": "ls"})))
    return httpx.post(stack.url + "/v1/responses", json={"model": "m", "input": "go", "tools": TOOLS, **fields},
                      timeout=30)


def _unthought(tag: dict) -> dict:
    """The constraint after Qwen3's optional `<think>…</think>\n\n` (markers as token ids)."""
    assert tag["type"] == "or"
    thought, bare = tag["elements"]
    assert thought["elements"][0] == {"type": "sequence", "elements": [
        {"type": "token", "token": THINK}, {"type": "any_tokens", "exclude_tokens": [END_THINK]},
        {"type": "token", "token": END_THINK}, {"type": "const_string", "value": "\n\n"}]}
    assert thought["elements"][1] == bare
    return bare


def _json(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": 32}


def _body(name: str, schema: dict) -> dict:
    """A Qwen3 call's text between its `<tool_call>` and `</tool_call>` tokens."""
    return {"type": "sequence", "elements": [
        {"type": "const_string", "value": f'\n{{"name": "{name}", "arguments": '}, _json(schema),
        {"type": "const_string", "value": "}\n"}]}


def _call(*bodies: dict) -> dict:
    content = bodies[0] if len(bodies) == 1 else {"type": "or", "elements": list(bodies)}
    return {"type": "tag", "begin": {"type": "token", "token": TOOL_CALL}, "content": content,
            "end": {"type": "token", "token": END_TOOL_CALL}}


EITHER = _call(_body("exec_command", PARAMS), _body("read_file", {"type": "object"}))


def test_tool_choice_required_forces_calls_of_any_tool_in_qwen3_syntax(stack, tokenizer):
    response = _responses(stack, tokenizer, tool_choice="required")
    assert response.status_code == 200, response.text
    assert response.json()["output"][0]["type"] == "function_call"
    assert _unthought(_tag(stack)) == {"type": "sequence", "elements": [EITHER, {
        "type": "repeat", "min": 0, "max": -1,
        "content": {"type": "sequence", "elements": [{"type": "const_string", "value": "\n"}, EITHER]}}]}


def test_a_named_function_and_parallel_false_force_exactly_one_call_of_it(stack, tokenizer):
    _responses(stack, tokenizer, tool_choice={"type": "function", "name": "exec_command"},
               parallel_tool_calls=False)
    assert _unthought(_tag(stack)) == _call(_body("exec_command", PARAMS))


def test_parallel_false_with_auto_lets_text_run_until_one_call(stack, tokenizer):
    _responses(stack, tokenizer, parallel_tool_calls=False)
    assert _unthought(_tag(stack)) == {"type": "token_triggered_tags", "trigger_tokens": [TOOL_CALL],
                                       "tags": [EITHER], "at_least_one": False, "stop_after_first": True}


def test_max_tool_calls_ends_the_generation_after_that_many_calls(stack, tokenizer):
    response = _responses(stack, tokenizer, tool_choice="required", max_tool_calls=2)
    assert response.status_code == 200, response.text
    assert response.json()["max_tool_calls"] == 2
    assert _unthought(_tag(stack)) == {"type": "sequence", "elements": [EITHER, {
        "type": "repeat", "min": 0, "max": 1,
        "content": {"type": "sequence", "elements": [{"type": "const_string", "value": "\n"}, EITHER]}}]}
    _responses(stack, tokenizer, max_tool_calls=3)  # auto: text, or up to 3 calls in one triggered tag
    between = {"type": "sequence", "elements": [{"type": "token", "token": END_TOOL_CALL},
                                                {"type": "const_string", "value": "\n"},
                                                {"type": "token", "token": TOOL_CALL}, EITHER["content"]]}
    run = {**EITHER, "content": {"type": "sequence", "elements": [
        EITHER["content"], {"type": "repeat", "min": 0, "max": 2, "content": between}]}}
    assert _unthought(_tag(stack)) == {"type": "token_triggered_tags", "trigger_tokens": [TOOL_CALL],
                                       "tags": [run], "at_least_one": False, "stop_after_first": True}
    _responses(stack, tokenizer, max_tool_calls=1)
    assert _unthought(_tag(stack))["tags"] == [EITHER]


def test_allowed_tools_limit_the_calls_not_the_prompt(stack, tokenizer):
    choice = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "read_file"}]}
    _responses(stack, tokenizer, tool_choice=choice)
    only = _call(_body("read_file", {"type": "object"}))
    assert _unthought(_tag(stack))["elements"][0] == only
    prompt = tokenizer.decode(stack.fake.bodies(GENERATE)[-1]["token_ids"])
    assert "exec_command" in prompt  # both tools are still offered


def test_json_schema_text_format_constrains_the_answer(stack, tokenizer):
    stack.reset()
    stack.fake.queue(Script(ids(tokenizer, '{"answer": 4}') + [IM_END]))
    text = {"format": {"type": "json_schema", "name": "a", "schema": SCHEMA, "strict": True}}
    response = httpx.post(stack.url + "/v1/responses", json={"model": "m", "input": "2+2", "text": text},
                          timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["text"] == text
    assert _unthought(_tag(stack)) == _json(SCHEMA)


def test_chat_response_format_and_named_tool_choice(stack, tokenizer):
    stack.reset()
    stack.fake.queue(Script(ids(tokenizer, "{}") + [IM_END]), Script(call_ids(tokenizer, "read_file", {})))
    client = stack.client()
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                   response_format={"type": "json_object"})
    assert _unthought(_tag(stack)) == _json({"type": "object"})
    completion = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], tools=CHAT_TOOLS,
        tool_choice={"type": "function", "function": {"name": "read_file"}})
    assert completion.choices[0].message.tool_calls[0].function.name == "read_file"
    assert _unthought(_tag(stack))["elements"][0] == _call(_body("read_file", {"type": "object"}))


def test_no_constraint_sends_none(stack, tokenizer):
    _responses(stack, tokenizer)
    assert _tag(stack) is None


@pytest.mark.parametrize(("fields", "param"), [
    ({"tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({"max_tool_calls": 0}, "max_tool_calls"),
    ({"text": {"format": {"type": "json_schema", "name": "a"}}}, "text.format.schema"),
    ({"tool_choice": "required", "tools": []}, "tool_choice"),
])
def test_what_cannot_be_enforced_is_a_400(stack, tokenizer, fields, param):
    response = _responses(stack, tokenizer, **fields)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert stack.fake.bodies(GENERATE) == []


def test_the_completions_endpoint_gets_it_at_the_top_level(qwen_tokenizer_dir, tokenizer):
    with fake_stack(qwen_tokenizer_dir, served_model_name="m", fake={"enable_scale_out": False}) as stack:
        stack.fake.queue(Script(call_ids(tokenizer, "exec_command", {"cmd": "ls"})))
        body = {"model": "m", "input": "go", "tools": TOOLS, "tool_choice": "required"}
        assert httpx.post(stack.url + "/v1/responses", json=body, timeout=30).status_code == 200
        assert _unthought(_tag(stack, COMPLETIONS))["elements"][0] == EITHER


def test_a_forced_call_with_thinking_off_is_not_made_to_think_first(qwen36_tokenizer_dir):
    """Qwen3.6's generation prompt opens `<think>`, so a forced call comes after the thought's `</think>`;
    with thinking off (reasoning effort "none") the prompt has closed it already: the call comes first
    (else the model must write a second `</think>` before it, and a model that does not never calls)."""
    end_think = 248069
    with fake_stack(qwen36_tokenizer_dir, served_model_name="m") as stack:
        tags = []
        for effort in ("medium", "none"):
            stack.fake.queue(Script([248046]))
            response = httpx.post(stack.url + "/v1/responses", timeout=30, json={
                "model": "m", "input": "go", "tools": TOOLS, "tool_choice": "required",
                "reasoning": {"effort": effort}})
            assert response.status_code == 200, response.text
            tags.append(_tag(stack))
    thinking, unthinking = tags
    assert thinking["type"] == "sequence" and thinking["elements"][0]["elements"][:2] == [
        {"type": "any_tokens", "exclude_tokens": [end_think]}, {"type": "token", "token": end_think}]
    assert unthinking == thinking["elements"][1]  # the calls at once: no second thought either


@pytest.fixture(scope="module")
def qwen36_tokenizer_dir():
    from tests.support.qwen36 import qwen36_tokenizer_dir as build

    return build()
