"""The openai-agents SDK completes a tool-calling loop through the gateway, exactly: its
Responses, Chat Completions and WebSocket models, streamed and not, on the scripted fake vLLM.

The model's call is scripted with its arguments spelled one character per token (what a
model may write, never what re-encoding gives), so the second prompt holding those very ids
shows the loop continued the generated tokens rather than re-rendering their text."""

from __future__ import annotations

import asyncio

import pytest
from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.models.openai_responses import OpenAIResponsesModel, OpenAIResponsesWSModel
from openai import AsyncOpenAI

from tests.codex.harness import answer_ids, call_ids
from tests.support.fake_vllm import Script

GENERATE = "/inference/v1/generate"
MODELS = {"responses": OpenAIResponsesModel, "chat": OpenAIChatCompletionsModel, "websocket": OpenAIResponsesWSModel}

set_tracing_disabled(True)  # the SDK would export traces to OpenAI: nothing leaves loopback


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


async def _run(stack, kind: str, streamed: bool, key: str) -> str:
    client = AsyncOpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0)
    agent = Agent(name="weather", instructions="Answer briefly.", tools=[get_weather],
                  model=MODELS[kind](model="tiny-qwen3", openai_client=client),
                  model_settings=ModelSettings(extra_body={"prompt_cache_key": key}))
    try:
        if not streamed:
            return (await Runner.run(agent, "Weather in Paris?")).final_output
        result = Runner.run_streamed(agent, "Weather in Paris?")
        async for _ in result.stream_events():
            pass
        return result.final_output
    finally:
        if isinstance(agent.model, OpenAIResponsesWSModel):
            await agent.model.close()
        await client.close()


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "streamed"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_the_agent_loop_runs_the_tool_and_continues_the_generated_ids(stack, tokenizer, kind, streamed):
    stack.reset()
    call = call_ids(tokenizer, "get_weather", {"city": "Paris"}, spell='"Paris"')
    stack.fake.queue(Script(call), Script(answer_ids(tokenizer, "It is sunny.")))
    final = asyncio.run(_run(stack, kind, streamed, f"agents-{kind}-{streamed}"))
    assert final == "It is sunny."
    first, second = (body["token_ids"] for body in stack.fake.bodies(GENERATE))
    assert second[:len(first) + len(call)] == first + call  # the call's own ids, not a re-render
    tail = tokenizer.decode(second[len(first) + len(call):])
    assert "<tool_response>\nSunny in Paris.\n</tool_response>" in tail
