"""Remote MCP tools through the gateway: a real MCP server (the `mcp` SDK) on loopback, the
scripted fake vLLM, the real openai SDK. The gateway lists the tools, runs the model's calls
and continues generating inside one response; the fake's request log shows every
generation's prompt continuing the previous one's exact ids.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from gateway.ops.vllm_process import free_port
from tests.conformance.openai_schema import errors
from tests.support.fake_vllm import Script
from tests.support.mcp_server import fingerprint, mcp_servers
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, IM_START, TOOL_CALL, ids
from tests.support.sse import sse_events
from tests.support.stack import fake_stack

MODEL = "tiny-qwen3"
GENERATE = "/inference/v1/generate"


@pytest.fixture(scope="module")
def servers():
    with mcp_servers() as servers:
        yield servers


@pytest.fixture(scope="module")
def stack(qwen_tokenizer_dir, servers):
    allowed = [servers.http, servers.sse.removesuffix("/sse")]
    with fake_stack(qwen_tokenizer_dir, served_model_name=MODEL, mcp_allowed_urls=allowed, mcp_timeout=3.0,
                    mcp_max_output_bytes=1 << 20) as stack:
        yield stack


@pytest.fixture
def fake(stack, servers):
    stack.reset()
    servers.calls.clear()
    return stack.fake


@pytest.fixture
def client(stack):
    return stack.client()


def mcp_tool(servers, approval="never", **extra):
    return {"type": "mcp", "server_label": "demo", "server_url": servers.http, "require_approval": approval, **extra}


def call(tokenizer, name: str, arguments: dict) -> list[int]:
    """The ids of a Qwen3 tool call the model writes (ending its turn), one character a token: not how
    the tokenizer would encode the text, so a prompt that re-rendered the call would differ."""
    text = "\n" + json.dumps({"name": name, "arguments": arguments}) + "\n"
    return [TOOL_CALL, *[token for char in text for token in ids(tokenizer, char)], END_TOOL_CALL, IM_END]


def tool_response(tokenizer, output: str) -> list[int]:
    """What a tool output adds to the prompt after the model's turn, up to the next assistant turn."""
    return [*ids(tokenizer, "\n"), IM_START, *ids(tokenizer, f"user\n<tool_response>\n{output}\n</tool_response>"),
            IM_END, *ids(tokenizer, "\n"), IM_START, *ids(tokenizer, "assistant\n")]


def test_an_mcp_call_runs_inside_the_response_on_exact_ids(fake, client, servers, tokenizer):
    first_call = call(tokenizer, "demo__add", {"a": 20, "b": 22})
    fake.queue(Script(first_call), Script(ids(tokenizer, "It is 42.") + [IM_END]))
    response = client.responses.create(model=MODEL, input="What is 20 + 22?", tools=[mcp_tool(servers)])
    assert [item.type for item in response.output] == ["mcp_list_tools", "mcp_call", "message"]
    listing, ran, answer = response.output
    assert listing.server_label == "demo" and [tool.name for tool in listing.tools][:2] == ["add", "fail"]
    assert (ran.name, ran.server_label, ran.output, ran.error, ran.status) == ("add", "demo", "42", None, "completed")
    assert json.loads(ran.arguments) == {"a": 20, "b": 22} and answer.content[0].text == "It is 42."
    assert servers.calls == [("add", {"a": 20, "b": 22})]
    first, second = (body["token_ids"] for body in fake.bodies(GENERATE))
    assert second == first + first_call + tool_response(tokenizer, "42")
    assert ids(tokenizer, tokenizer.decode(first_call[1:-2])) != first_call[1:-2]  # what a re-render would send
    assert "demo__add" in tokenizer.decode(first)  # the listed tools are offered by their model-visible names
    assert response.usage.input_tokens == len(first) + len(second)
    assert response.usage.output_tokens == len(first_call) + len(ids(tokenizer, "It is 42.")) + 1
    echoed = response.model_dump()["tools"][0]
    assert echoed["server_url"] == servers.http and echoed["headers"] is None


def test_streamed_events_are_openais(fake, stack, servers, tokenizer):
    fake.queue(Script(call(tokenizer, "demo__add", {"a": 1, "b": 2})), Script(ids(tokenizer, "3") + [IM_END]))
    body = {"model": MODEL, "input": "1 + 2?", "tools": [mcp_tool(servers)], "stream": True}
    with httpx.stream("POST", stack.url + "/v1/responses", json=body, timeout=30) as streamed:
        events = sse_events(streamed)
    kinds = [event["type"] for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    start = kinds.index("response.mcp_list_tools.in_progress")
    assert kinds[start - 1:start + 3] == ["response.output_item.added", "response.mcp_list_tools.in_progress",
                                          "response.mcp_list_tools.completed", "response.output_item.done"]
    call_events = [kind for kind in kinds if kind.startswith("response.mcp_call")]
    assert call_events[0] == "response.mcp_call_arguments.delta"
    assert call_events[-3:] == ["response.mcp_call_arguments.done", "response.mcp_call.in_progress",
                                "response.mcp_call.completed"]
    assert kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [item["type"] for item in done] == ["mcp_list_tools", "mcp_call", "message"]
    assert done[1]["output"] == "3"
    for event in events:
        assert errors("ResponseStreamEvent", event) == [], event["type"]
    assert events[-1]["response"]["output"] == done


def test_the_sse_transport_works_the_same(fake, client, servers, tokenizer):
    fake.queue(Script(call(tokenizer, "legacy__add", {"a": 2, "b": 3})), Script(ids(tokenizer, "5") + [IM_END]))
    tool = {"type": "mcp", "server_label": "legacy", "server_url": servers.sse, "require_approval": "never"}
    response = client.responses.create(model=MODEL, input="2 + 3?", tools=[tool])
    assert [item.type for item in response.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert response.output[1].output == "5"


def test_a_url_outside_the_allowlist_is_refused_before_any_connection(fake, client, servers):
    port = free_port()
    for url in (f"http://127.0.0.1:{port}/mcp", servers.http.replace("/mcp", "/mcpx"),
                servers.http.replace("127.0.0.1", "localhost"), "http://user:pw@" + servers.http[len("http://"):],
                "file:///etc/passwd"):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model=MODEL, input="hi", tools=[mcp_tool(servers, server_url=url)])
        assert refused.value.body["param"] == "tools[0].server_url", url
        assert refused.value.body["code"] in ("mcp_server_not_allowed", "invalid_value"), url
    assert fake.bodies(GENERATE) == [] and servers.calls == []


def test_approval_always_ends_the_response_and_the_approval_runs_the_call(fake, client, servers, tokenizer):
    proposed = call(tokenizer, "demo__add", {"a": 3, "b": 4})
    fake.queue(Script(proposed), Script(ids(tokenizer, "Seven.") + [IM_END]))
    tools = [mcp_tool(servers, approval="always")]
    first = client.responses.create(model=MODEL, input="3 + 4?", tools=tools)
    assert [item.type for item in first.output] == ["mcp_list_tools", "mcp_approval_request"]
    request = first.output[1]
    assert (request.name, request.server_label, json.loads(request.arguments)) == ("add", "demo", {"a": 3, "b": 4})
    assert servers.calls == [] and len(fake.bodies(GENERATE)) == 1
    second = client.responses.create(model=MODEL, previous_response_id=first.id, tools=tools, input=[
        {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}])
    assert [item.type for item in second.output] == ["mcp_call", "message"]  # the listing is reused
    assert second.output[0].output == "7" and second.output[0].approval_request_id == request.id
    assert servers.calls == [("add", {"a": 3, "b": 4})]
    first_prompt, second_prompt = (body["token_ids"] for body in fake.bodies(GENERATE))
    assert second_prompt == first_prompt + proposed + tool_response(tokenizer, "7")


def test_a_declined_call_is_not_run(fake, client, servers, tokenizer):
    fake.queue(Script(call(tokenizer, "demo__add", {"a": 1, "b": 1})), Script(ids(tokenizer, "Ok.") + [IM_END]))
    tools = [mcp_tool(servers, approval={"never": {"tool_names": ["fail"]}})]
    first = client.responses.create(model=MODEL, input="1 + 1?", tools=tools)
    assert first.output[-1].type == "mcp_approval_request"
    second = client.responses.create(model=MODEL, previous_response_id=first.id, tools=tools, input=[
        {"type": "mcp_approval_response", "approval_request_id": first.output[-1].id, "approve": False,
         "reason": "not now"}])
    assert [item.type for item in second.output] == ["message"] and servers.calls == []
    assert "declined" in tokenizer.decode(fake.bodies(GENERATE)[-1]["token_ids"])


def test_an_approval_for_an_unknown_request_is_a_400(fake, client, servers):
    with pytest.raises(openai.BadRequestError) as unknown:
        client.responses.create(model=MODEL, tools=[mcp_tool(servers)], input=[
            {"role": "user", "content": "hi"},
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_nope", "approve": True}])
    assert unknown.value.body["code"] == "mcp_approval_request_not_found"
    assert unknown.value.body["param"] == "input[1].approval_request_id"
    assert fake.bodies(GENERATE) == [] and servers.calls == []


@pytest.mark.parametrize(("tool", "arguments", "error_type", "message"), [
    ("fail", {"reason": "why"}, "mcp_tool_execution_error", "failed on purpose"),
    ("huge", {}, "mcp_protocol_error", "over the gateway's bound"),
    ("hang", {}, "mcp_protocol_error", "did not answer within 3 s"),
])
def test_a_failing_call_is_an_error_the_model_reads(fake, client, servers, tokenizer, tool, arguments, error_type,
                                                    message):
    fake.queue(Script(call(tokenizer, f"demo__{tool}", arguments)), Script(ids(tokenizer, "Sorry.") + [IM_END]))
    response = client.responses.create(model=MODEL, input="go", tools=[mcp_tool(servers)])
    ran = response.output[1]
    assert (ran.type, ran.status, ran.output) == ("mcp_call", "failed", None)
    assert ran.error.type == error_type
    shown = ran.error.message if error_type != "mcp_tool_execution_error" else ran.error.content[0]["text"]
    assert response.output[-1].content[0].text == "Sorry."
    second = fake.bodies(GENERATE)[-1]["token_ids"]
    assert message in shown or error_type == "mcp_tool_execution_error"
    assert shown in tokenizer.decode(second)  # the model reads what went wrong


def test_a_server_that_is_down_fails_the_listing_and_the_model_goes_on(qwen_tokenizer_dir, tokenizer):
    port = free_port()  # nothing listens there
    allowed = [f"http://127.0.0.1:{port}/"]
    with fake_stack(qwen_tokenizer_dir, served_model_name=MODEL, mcp_allowed_urls=allowed) as down:
        down.fake.queue(Script(ids(tokenizer, "No tools today.") + [IM_END]))
        response = down.client().responses.create(model=MODEL, input="hi", tools=[
            {"type": "mcp", "server_label": "gone", "server_url": f"http://127.0.0.1:{port}/mcp",
             "require_approval": "never"}])
    listing, answer = response.output
    assert listing.type == "mcp_list_tools" and listing.tools == [] and "could not be reached" in listing.error
    assert answer.content[0].text == "No tools today."


def test_mixed_with_a_function_tool_a_function_call_ends_the_response(fake, client, servers, tokenizer):
    weather = {"type": "function", "name": "weather", "description": "The weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    fake.queue(Script(call(tokenizer, "demo__add", {"a": 1, "b": 2})),
               Script(call(tokenizer, "weather", {"city": "Oslo"})), Script(ids(tokenizer, "Sunny, and 3.") + [IM_END]))
    tools = [mcp_tool(servers), weather]
    first = client.responses.create(model=MODEL, input="Add, then weather", tools=tools)
    assert [item.type for item in first.output] == ["mcp_list_tools", "mcp_call", "function_call"]
    function_call = first.output[-1]
    second = client.responses.create(model=MODEL, previous_response_id=first.id, tools=tools, input=[
        {"type": "function_call_output", "call_id": function_call.call_id, "output": "sunny"}])
    assert second.output_text == "Sunny, and 3." and [item.type for item in second.output] == ["message"]
    prompts = [body["token_ids"] for body in fake.bodies(GENERATE)]
    weather_call = call(tokenizer, "weather", {"city": "Oslo"})
    assert prompts[2][:len(prompts[1]) + len(weather_call)] == prompts[1] + weather_call


def test_max_tool_calls_bounds_the_loop(fake, client, servers, tokenizer):
    fake.queue(Script(call(tokenizer, "demo__add", {"a": 1, "b": 1})),
               Script(call(tokenizer, "demo__add", {"a": 2, "b": 2})))
    response = client.responses.create(model=MODEL, input="loop", tools=[mcp_tool(servers)], max_tool_calls=1)
    assert [item.type for item in response.output] == ["mcp_list_tools", "mcp_call"]
    assert len(fake.bodies(GENERATE)) == 1 and servers.calls == [("add", {"a": 1, "b": 1})]


def test_a_client_leaving_mid_call_aborts_the_call_and_generates_no_more(fake, stack, servers, tokenizer):
    fake.queue(Script(call(tokenizer, "demo__hang", {})), Script(ids(tokenizer, "never") + [IM_END]))
    servers.hanging.clear()
    servers.hang_ended.clear()
    body = {"model": MODEL, "input": "hang", "tools": [mcp_tool(servers)], "stream": True}
    with httpx.stream("POST", stack.url + "/v1/responses", json=body, timeout=30) as streamed:
        for line in streamed.iter_lines():
            if "response.mcp_call.in_progress" in line:
                assert servers.hanging.wait(10), "the call never reached the MCP server"
                break  # the client leaves while the call runs
    assert servers.hang_ended.wait(10), "the MCP call went on after the client left"
    assert len(fake.bodies(GENERATE)) == 1


def test_the_listing_in_a_resent_history_is_reused(fake, client, servers, tokenizer):
    fake.queue(Script(call(tokenizer, "demo__add", {"a": 5, "b": 5})), Script(ids(tokenizer, "10") + [IM_END]),
               Script(ids(tokenizer, "Bye") + [IM_END]))
    tools = [mcp_tool(servers)]
    first = client.responses.create(model=MODEL, input="5 + 5?", tools=tools, store=False)
    history = [{"role": "user", "content": "5 + 5?"}, *[item.model_dump(exclude_none=True) for item in first.output],
               {"role": "user", "content": "Thanks"}]
    second = client.responses.create(model=MODEL, input=history, tools=tools, store=False)
    assert [item.type for item in second.output] == ["message"]
    assert servers.calls == [("add", {"a": 5, "b": 5})]
    assert "demo__add" in tokenizer.decode(fake.bodies(GENERATE)[-1]["token_ids"])


def test_mcp_in_a_conversation_and_over_websocket(fake, stack, servers, tokenizer):
    fake.queue(Script(call(tokenizer, "demo__add", {"a": 4, "b": 4})), Script(ids(tokenizer, "8") + [IM_END]),
               Script(ids(tokenizer, "Sure") + [IM_END]))
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0)
    conversation = client.conversations.create()
    tools = [mcp_tool(servers)]

    async def over_websocket():
        aclient = openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0)
        kinds = []
        async with aclient.responses.connect() as conn:
            for text in ("4 + 4?", "Thanks"):
                await conn.response.create(model=MODEL, input=text, tools=tools, conversation=conversation.id)
                async for event in conn:
                    kinds.append(event.type)
                    if event.type in ("response.completed", "response.failed", "error"):
                        break
        return kinds

    kinds = asyncio.run(over_websocket())
    assert kinds.count("response.completed") == 2 and "response.mcp_call.completed" in kinds
    assert kinds.count("response.mcp_list_tools.completed") == 1  # the conversation holds the listing
    items = [item.type for item in client.conversations.items.list(conversation.id, order="asc")]
    assert items == ["message", "mcp_list_tools", "mcp_call", "message", "message", "message"]
    prompts = [body["token_ids"] for body in fake.bodies(GENERATE)]
    assert prompts[1][:len(prompts[0])] == prompts[0] and prompts[2][:len(prompts[1])] == prompts[1]


def test_a_rollout_holds_the_whole_loop(fake, stack, servers, tokenizer):
    first_call = call(tokenizer, "demo__add", {"a": 6, "b": 7})
    answer = ids(tokenizer, "13") + [IM_END]
    fake.queue(Script(first_call), Script(answer))
    response = httpx.post(stack.url + "/v1/responses", timeout=30, json={
        "model": MODEL, "input": "6 + 7?", "tools": [mcp_tool(servers)], "rollout_id": "mcp-episode"})
    assert response.status_code == 200, response.text
    rollout = httpx.get(stack.url + "/v1/rollouts/mcp-episode", timeout=10).json()
    first, second = (body["token_ids"] for body in fake.bodies(GENERATE))
    assert rollout["token_ids"] == second + answer
    output = tool_response(tokenizer, "13")
    mask = [0] * len(first) + [1] * len(first_call) + [0] * len(output) + [1] * len(answer)
    assert rollout["loss_mask"] == mask and len(rollout["segments"]) == 1
    turns = rollout["turns"]
    assert len(turns) == 2 and turns[0]["tool_calls"] is None
    (ran,) = turns[1]["tool_calls"]
    assert (ran["server_label"], ran["name"], ran["error"]) == ("demo", "add", None) and ran["seconds"] > 0


def test_headers_reach_the_server_and_are_never_kept(fake, stack, client, servers, tokenizer, caplog):
    fake.queue(Script(call(tokenizer, "demo__echo_auth", {})), Script(ids(tokenizer, "Done.") + [IM_END]))
    secret = "Bearer sk-mcp-secret-123"
    with caplog.at_level("DEBUG"):
        response = client.responses.create(model=MODEL, input="who am I?", tools=[
            mcp_tool(servers, headers={"Authorization": secret})])
    assert response.output[1].output == fingerprint(secret)  # the MCP server got it
    stored = httpx.get(f"{stack.url}/v1/responses/{response.id}", timeout=10)
    assert stored.status_code == 200 and "sk-mcp-secret" not in stored.text
    assert stored.json()["tools"][0]["headers"] is None
    assert "sk-mcp-secret" not in caplog.text
