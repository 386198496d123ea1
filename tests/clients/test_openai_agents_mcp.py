"""The openai-agents SDK's hosted MCP tool and Conversations session through the gateway: a
real MCP server (the `mcp` SDK) on loopback, the scripted fake vLLM.

- `HostedMCPTool` with `require_approval: "never"`: the gateway lists and calls the tool
  inside the agent's one model call;
- `HostedMCPTool` with `"always"` and an approval callback: the SDK approves the gateway's
  `mcp_approval_request` and calls the model again, which runs the call;
- `OpenAIConversationsSession`: a two-turn agent whose history lives in the gateway's
  conversation, and `conversation_id`: the second turn's prompt continues the first's exact ids;
- both together: an agent with a hosted MCP tool in a Conversations session, two turns.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from agents import Agent, HostedMCPTool, OpenAIConversationsSession, Runner, set_tracing_disabled
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI

from tests.support.fake_vllm import Script
from tests.support.mcp_server import mcp_servers
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, TOOL_CALL, ids
from tests.support.stack import fake_stack

MODEL = "tiny-qwen3"
GENERATE = "/inference/v1/generate"

set_tracing_disabled(True)  # nothing leaves loopback


@pytest.fixture(scope="module")
def servers():
    with mcp_servers() as servers:
        yield servers


@pytest.fixture(scope="module")
def stack(qwen_tokenizer_dir, servers):
    with fake_stack(qwen_tokenizer_dir, served_model_name=MODEL, mcp_allowed_urls=[servers.http]) as stack:
        yield stack


@pytest.fixture
def fake(stack, servers):
    stack.reset()
    servers.calls.clear()
    return stack.fake


def call(tokenizer, name: str, arguments: dict) -> list[int]:
    """A Qwen3 tool call spelled one character a token (never what re-encoding gives)."""
    text = "\n" + json.dumps({"name": name, "arguments": arguments}) + "\n"
    return [TOOL_CALL, *[token for char in text for token in ids(tokenizer, char)], END_TOOL_CALL, IM_END]


def agent(stack, tools, client: AsyncOpenAI) -> Agent:
    return Agent(name="calculator", instructions="Use the tools.", tools=tools,
                 model=OpenAIResponsesModel(model=MODEL, openai_client=client))


def client_of(stack) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0)


def test_hosted_mcp_tool_without_approval(fake, stack, servers, tokenizer):
    proposed = call(tokenizer, "calc__add", {"a": 2, "b": 40})
    fake.queue(Script(proposed), Script(ids(tokenizer, "42.") + [IM_END]))
    tool = HostedMCPTool(tool_config={"type": "mcp", "server_label": "calc", "server_url": servers.http,
                                      "require_approval": "never"})

    async def run():
        client = client_of(stack)
        try:
            return await Runner.run(agent(stack, [tool], client), "What is 2 + 40?")
        finally:
            await client.close()

    result = asyncio.run(run())
    assert result.final_output == "42."
    kinds = [item.type for item in result.new_items]
    assert "mcp_list_tools_item" in kinds and "tool_call_item" in kinds
    assert servers.calls == [("add", {"a": 2, "b": 40})]
    first, second = (body["token_ids"] for body in fake.bodies(GENERATE))
    assert second[:len(first) + len(proposed)] == first + proposed


def test_hosted_mcp_tool_with_an_approval_callback(fake, stack, servers, tokenizer):
    proposed = call(tokenizer, "calc__add", {"a": 1, "b": 2})
    fake.queue(Script(proposed), Script(ids(tokenizer, "Three.") + [IM_END]))
    asked = []

    def approve(request):
        asked.append((request.data.name, json.loads(request.data.arguments)))
        return {"approve": True}

    tool = HostedMCPTool(tool_config={"type": "mcp", "server_label": "calc", "server_url": servers.http,
                                      "require_approval": "always"}, on_approval_request=approve)

    async def run():
        client = client_of(stack)
        try:
            return await Runner.run(agent(stack, [tool], client), "What is 1 + 2?")
        finally:
            await client.close()

    result = asyncio.run(run())
    assert asked == [("add", {"a": 1, "b": 2})] and servers.calls == [("add", {"a": 1, "b": 2})]
    assert result.final_output == "Three."
    prompts = [body["token_ids"] for body in fake.bodies(GENERATE)]
    assert len(prompts) == 2 and "<tool_response>\n3\n</tool_response>" in tokenizer.decode(prompts[1])


def test_a_conversations_session_keeps_the_history_in_the_gateway(fake, stack, tokenizer):
    fake.queue(Script(ids(tokenizer, "Hello Ada.") + [IM_END]), Script(ids(tokenizer, "You are Ada.") + [IM_END]))

    async def run():
        client = client_of(stack)
        try:
            session = OpenAIConversationsSession(openai_client=client)
            bot = agent(stack, [], client)
            first = await Runner.run(bot, "I am Ada.", session=session)
            second = await Runner.run(bot, "Who am I?", session=session)
            items = await session.get_items()
            return first.final_output, second.final_output, items
        finally:
            await client.close()

    first, second, items = asyncio.run(run())
    assert (first, second) == ("Hello Ada.", "You are Ada.")
    texts = [item["content"][0]["text"] if isinstance(item["content"], list) else item["content"] for item in items]
    assert texts == ["I am Ada.", "Hello Ada.", "Who am I?", "You are Ada."]
    second_prompt = tokenizer.decode(fake.bodies(GENERATE)[-1]["token_ids"])
    assert "I am Ada." in second_prompt and "Hello Ada." in second_prompt


def test_a_conversation_id_continues_the_exact_ids(fake, stack, tokenizer):
    generated = [*tokenizer.convert_tokens_to_ids(["Hel", "lo", "ĠA", "da"]), IM_END]
    assert ids(tokenizer, "Hello Ada") != generated[:-1]
    fake.queue(Script(generated), Script(ids(tokenizer, "Ada.") + [IM_END]))

    async def run():
        client = client_of(stack)
        try:
            conversation = await client.conversations.create()
            bot = agent(stack, [], client)
            await Runner.run(bot, "I am Ada.", conversation_id=conversation.id)
            return (await Runner.run(bot, "Who am I?", conversation_id=conversation.id)).final_output
        finally:
            await client.close()

    assert asyncio.run(run()) == "Ada."
    first, second = (body["token_ids"] for body in fake.bodies(GENERATE))
    assert second[:len(first) + len(generated)] == first + generated


def test_an_agent_with_a_hosted_mcp_tool_in_a_conversations_session(fake, stack, servers, tokenizer):
    """Both at once, over two turns: the second resends the conversation's MCP items (the listing
    and the call), which the gateway reads back — the listing reused, not fetched again."""
    proposed = call(tokenizer, "calc__add", {"a": 19, "b": 23})
    fake.queue(Script(proposed), Script(ids(tokenizer, "42.") + [IM_END]),
               Script(ids(tokenizer, "Still 42.") + [IM_END]))
    tool = HostedMCPTool(tool_config={"type": "mcp", "server_label": "calc", "server_url": servers.http,
                                      "require_approval": "never"})

    async def run():
        client = client_of(stack)
        try:
            session = OpenAIConversationsSession(openai_client=client)
            bot = agent(stack, [tool], client)
            first = await Runner.run(bot, "What is 19 + 23?", session=session)
            second = await Runner.run(bot, "And again?", session=session)
            return first, second, await session.get_items()
        finally:
            await client.close()

    first, second, items = asyncio.run(run())
    assert (first.final_output, second.final_output) == ("42.", "Still 42.")
    assert "mcp_list_tools_item" in [item.type for item in first.new_items]
    assert "mcp_list_tools_item" not in [item.type for item in second.new_items]  # reused from the conversation
    kinds = [item.get("type", "message") for item in items]
    assert kinds.count("mcp_list_tools") == 1 and kinds.count("mcp_call") == 1
    assert servers.calls == [("add", {"a": 19, "b": 23})]
    last_prompt = tokenizer.decode(fake.bodies(GENERATE)[-1]["token_ids"])
    assert "<tool_response>\n42\n</tool_response>" in last_prompt and "calc__add" in last_prompt
