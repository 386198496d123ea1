"""LangChain's ChatOpenAI completes tool-calling loops through the gateway, exactly, on its
Responses and Chat Completions clients, streamed and not (on Responses a reasoning model's
turn: thinking, then a call), and `with_structured_output(method="json_schema")` parses the constrained
answer. On the scripted fake vLLM; the call's arguments are spelled one character per token,
so the next prompt holding those ids shows the loop continued the generated tokens."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from tests.codex.harness import answer_ids, call_ids
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_THINK, THINK, ids

GENERATE = "/inference/v1/generate"


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


class Answer(BaseModel):
    answer: int


def _llm(stack, responses: bool, **options) -> ChatOpenAI:
    return ChatOpenAI(model="tiny-qwen3", base_url=stack.url + "/v1", api_key="unused", max_retries=0,
                      use_responses_api=responses, **options)


def _ask(model, messages, streamed: bool):
    if not streamed:
        return model.invoke(messages)
    message: AIMessageChunk | None = None
    for chunk in model.stream(messages):
        message = chunk if message is None else message + chunk
    return message


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "streamed"])
@pytest.mark.parametrize("responses", [True, False], ids=["responses", "chat"])
def test_a_tool_loop_continues_the_generated_ids(stack, tokenizer, responses, streamed):
    stack.reset()
    call = call_ids(tokenizer, "get_weather", {"city": "Paris"}, spell='"Paris"')
    # LangChain's Chat Completions client keeps no `reasoning` on the messages it sends back, so
    # a thinking turn could not be recognised there (the history it resends has no thinking).
    thought = [THINK, *ids(tokenizer, "\nNeed the weather.\n"), END_THINK, *ids(tokenizer, "\n\n")]
    turn = [*(thought if responses else []), *call]
    stack.fake.queue(Script(turn), Script(answer_ids(tokenizer, "It is sunny.")))
    key = f"langchain-{responses}-{streamed}"
    model = _llm(stack, responses, extra_body={"prompt_cache_key": key}).bind_tools([get_weather])
    messages = [HumanMessage("Weather in Paris?")]
    reply = _ask(model, messages, streamed)
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("get_weather", {"city": "Paris"})]
    messages += [reply, *(ToolMessage(get_weather.invoke(c["args"]), tool_call_id=c["id"]) for c in reply.tool_calls)]
    final = _ask(model, messages, streamed)
    assert final.text == "It is sunny."
    first, second = (body["token_ids"] for body in stack.fake.bodies(GENERATE))
    assert second[:len(first) + len(turn)] == first + turn  # thinking and call as generated
    assert "<tool_response>\nSunny in Paris.\n</tool_response>" in tokenizer.decode(second[len(first) + len(turn):])


@pytest.mark.parametrize("responses", [True, False], ids=["responses", "chat"])
def test_with_structured_output_json_schema_parses_the_constrained_answer(stack, tokenizer, responses):
    stack.reset()
    stack.fake.queue(Script(answer_ids(tokenizer, '{"answer": 4}')))
    structured = _llm(stack, responses).with_structured_output(Answer, method="json_schema")
    assert structured.invoke("2+2?") == Answer(answer=4)
    sent = stack.fake.bodies(GENERATE)[-1]["sampling_params"]["structured_outputs"]
    tag = json.loads(sent["structural_tag"])["format"]
    assert tag["elements"][1]["json_schema"]["properties"] == {"answer": {"title": "Answer", "type": "integer"}}
