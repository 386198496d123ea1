"""Conversations: the openai SDK's `conversations` client against the gateway, and responses
created with `conversation` (HTTP and WebSocket) continuing its exact tokens.

Every test runs with the state in process and in a real redis-server. The fake upstream's
request log shows what each prompt was made of.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from gateway.core.conversation import Conversation, Message
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, IM_START, TOOL_CALL, ids
from tests.support.stack import tenants_stack

MODEL = "tiny-qwen3"
GENERATE = "/inference/v1/generate"
ALICE, BOB = "sk-alice", "sk-bob"


@pytest.fixture(scope="module", params=["memory", "redis"])
def stack(request, qwen_tokenizer_dir, tmp_path_factory):
    with tenants_stack(qwen_tokenizer_dir, {ALICE: "alice", BOB: "bob"}, request.param,
                       tmp_path_factory.mktemp("keys"), served_model_name=MODEL) as running:
        yield running


def as_tenant(stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.url + "/v1", api_key=key, max_retries=0)


@pytest.fixture
def client(stack):
    return as_tenant(stack, ALICE)


def test_conversation_crud_and_item_pages(client):
    conversation = client.conversations.create(
        metadata={"topic": "demo"},
        items=[{"type": "message", "role": "user", "content": "one"},
               {"type": "message", "role": "assistant", "content": "two"},
               {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "three"}]}])
    assert conversation.object == "conversation" and conversation.id.startswith("conv_")
    assert conversation.metadata == {"topic": "demo"}
    assert client.conversations.retrieve(conversation.id).model_dump() == conversation.model_dump()
    updated = client.conversations.update(conversation.id, metadata={"topic": "changed"})
    assert updated.metadata == {"topic": "changed"} and updated.created_at == conversation.created_at

    newest_first = client.conversations.items.list(conversation.id, limit=2)
    assert [item.content[0].text for item in newest_first.data] == ["three", "two"]
    assert newest_first.has_more and newest_first.first_id == newest_first.data[0].id
    rest = client.conversations.items.list(conversation.id, limit=2, after=newest_first.last_id)
    assert [item.content[0].text for item in rest.data] == ["one"] and not rest.has_more
    in_order = list(client.conversations.items.list(conversation.id, order="asc"))  # the SDK pages through
    assert [(item.role, item.content[0].type, item.content[0].text) for item in in_order] == [
        ("user", "input_text", "one"), ("assistant", "output_text", "two"), ("user", "input_text", "three")]

    added = client.conversations.items.create(conversation.id, items=[
        {"type": "message", "role": "user", "content": "four"}])
    assert added.object == "list" and [item.content[0].text for item in added.data] == ["four"]
    got = client.conversations.items.retrieve(added.data[0].id, conversation_id=conversation.id)
    assert got.model_dump() == added.data[0].model_dump()
    after_delete = client.conversations.items.delete(in_order[1].id, conversation_id=conversation.id)
    assert after_delete.id == conversation.id
    left = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [item.content[0].text for item in left] == ["one", "three", "four"]

    deleted = client.conversations.delete(conversation.id)
    assert deleted.deleted and deleted.object == "conversation.deleted" and deleted.id == conversation.id
    with pytest.raises(openai.NotFoundError) as gone:
        client.conversations.retrieve(conversation.id)
    assert gone.value.body["code"] == "conversation_not_found" and "deleted" in gone.value.body["message"]
    with pytest.raises(openai.NotFoundError) as unknown:
        client.conversations.items.list("conv_unknown")
    assert "not found" in unknown.value.body["message"]


def test_bad_requests_get_clear_errors(client):
    conversation = client.conversations.create()
    with pytest.raises(openai.NotFoundError) as missing_item:
        client.conversations.items.retrieve("msg_nope", conversation_id=conversation.id)
    assert missing_item.value.body["code"] == "item_not_found"
    with pytest.raises(openai.BadRequestError) as too_many:
        client.conversations.items.create(conversation.id, items=[{"role": "user", "content": "x"}] * 21)
    assert "At most 20 items" in too_many.value.body["message"]
    with pytest.raises(openai.BadRequestError) as bad_item:
        client.conversations.items.create(conversation.id, items=[{"type": "nonsense"}])
    assert bad_item.value.body["param"] == "items[0].type"
    with pytest.raises(openai.BadRequestError) as bad_content:
        client.conversations.items.create(conversation.id, items=[{"type": "message", "role": "user", "content": 5}])
    assert bad_content.value.body["param"] == "items[0].content"
    assert "expected a string or an array, but got an integer" in bad_content.value.body["message"]
    with pytest.raises(openai.BadRequestError) as unanswered:
        client.conversations.items.create(conversation.id, items=[
            {"type": "message", "role": "user", "content": "hi"},
            {"type": "function_call_output", "call_id": "call_nope", "output": "x"}])
    assert unanswered.value.body["param"] == "items[1].call_id" and "call_nope" in unanswered.value.body["message"]
    with pytest.raises(openai.BadRequestError) as metadata:
        client.conversations.create(metadata={f"k{i}": "v" for i in range(17)})
    assert metadata.value.body["param"] == "metadata" and "at most 16 items" in metadata.value.body["message"]
    with pytest.raises(openai.BadRequestError) as long_key:
        client.conversations.update(conversation.id, metadata={"k" * 65: "v"})
    assert long_key.value.body["param"].startswith("metadata.k") and "at most 64" in long_key.value.body["message"]
    with pytest.raises(openai.BadRequestError) as bad_ref:
        client.responses.create(model=MODEL, input="hi", conversation={"id": 5})
    assert bad_ref.value.body["param"] == "conversation.id" and "expected a string" in bad_ref.value.body["message"]
    with pytest.raises(openai.BadRequestError) as both:
        client.responses.create(model=MODEL, input="hi", conversation=conversation.id, previous_response_id="resp_1")
    assert both.value.body["code"] == "mutually_exclusive_parameters"
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model=MODEL, input="hi", conversation="conv_unknown")
    assert unknown.value.body["param"] == "conversation"


def test_another_tenants_conversation_is_unknown(stack, client):
    conversation = client.conversations.create(items=[{"role": "user", "content": "secret"}])
    bob = as_tenant(stack, BOB)
    with pytest.raises(openai.NotFoundError):
        bob.conversations.retrieve(conversation.id)
    with pytest.raises(openai.NotFoundError):
        bob.conversations.items.list(conversation.id)
    with pytest.raises(openai.NotFoundError):
        bob.conversations.delete(conversation.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(model=MODEL, input="tell me", conversation={"id": conversation.id})
    assert [item.content[0].text for item in client.conversations.items.list(conversation.id)] == ["secret"]


def test_responses_in_a_conversation_continue_its_exact_tokens(fake, client, tokenizer):
    """The second response's prompt is the first's prompt + its generated ids + the new
    items: "Hello world" was generated in a non-canonical split, which a re-render would change."""
    generated = [*tokenizer.convert_tokens_to_ids(["Hel", "lo", "Ġwor", "ld"]), IM_END]
    assert ids(tokenizer, "Hello world") != generated[:-1]
    fake.queue(Script(generated), Script(ids(tokenizer, "Fine") + [IM_END]))
    conversation = client.conversations.create(items=[{"role": "user", "content": "Hi"}])
    first = client.responses.create(model=MODEL, instructions="Be brief.", input="Greet me",
                                    conversation=conversation.id)
    assert first.output_text == "Hello world" and first.conversation.id == conversation.id
    second = client.responses.create(model=MODEL, instructions="Be brief.", input="How are you?",
                                     conversation={"id": conversation.id}, stream=True)
    assert [event.type for event in second][-1] == "response.completed"
    first_prompt, second_prompt = (body["token_ids"] for body in fake.bodies(GENERATE)[-2:])
    assert second_prompt[:len(first_prompt) + len(generated)] == first_prompt + generated
    assert second_prompt[len(first_prompt) + len(generated):] == [
        *ids(tokenizer, "\n"), IM_START, *ids(tokenizer, "user\nHow are you?"), IM_END, *ids(tokenizer, "\n"),
        IM_START, *ids(tokenizer, "assistant\n")]
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [(item.type, item.role, item.content[0].text) for item in items] == [
        ("message", "user", "Hi"), ("message", "user", "Greet me"), ("message", "assistant", "Hello world"),
        ("message", "user", "How are you?"), ("message", "assistant", "Fine")]
    assert items[2].id == first.output[0].id


def test_tool_calls_and_outputs_carry_across_responses(fake, client, tokenizer):
    tools = [{"type": "function", "name": "lookup", "description": "Look a word up",
              "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}]
    call = [TOOL_CALL, *ids(tokenizer, '\n{"name": "lookup", "arguments": {"word": "gateway"}}\n'), END_TOOL_CALL,
            IM_END]
    fake.queue(Script(call), Script(ids(tokenizer, "A door") + [IM_END]))
    conversation = client.conversations.create()
    first = client.responses.create(model=MODEL, input="What is a gateway?", tools=tools, conversation=conversation.id)
    call_id = first.output[0].call_id
    second = client.responses.create(model=MODEL, tools=tools, conversation=conversation.id, input=[
        {"type": "function_call_output", "call_id": call_id, "output": "a way in"}])
    assert second.output_text == "A door"
    first_prompt, second_prompt = (body["token_ids"] for body in fake.bodies(GENERATE)[-2:])
    assert second_prompt[:len(first_prompt) + len(call)] == first_prompt + call
    kinds = [item.type for item in client.conversations.items.list(conversation.id, order="asc")]
    assert kinds == ["message", "function_call", "function_call_output", "message"]


def test_a_failed_response_appends_nothing(fake, client, tokenizer):
    fake.queue(Script(ids(tokenizer, "Partial answer") + [IM_END], error_after=1))
    conversation = client.conversations.create(items=[{"role": "user", "content": "Hi"}])
    with pytest.raises(openai.APIError):
        client.responses.create(model=MODEL, input="Go on", conversation=conversation.id)
    assert [item.content[0].text for item in client.conversations.items.list(conversation.id)] == ["Hi"]


def test_a_deleted_item_renders_the_next_prompt_in_full(fake, client, tokenizer, qwen_format):
    generated = [*tokenizer.convert_tokens_to_ids(["Hel", "lo", "Ġwor", "ld"]), IM_END]
    fake.queue(Script(generated), Script(ids(tokenizer, "Ok") + [IM_END]))
    conversation = client.conversations.create(items=[{"role": "user", "content": "Forget me"}])
    client.responses.create(model=MODEL, input="Hi", conversation=conversation.id)
    first_item = next(iter(client.conversations.items.list(conversation.id, order="asc")))
    client.conversations.items.delete(first_item.id, conversation_id=conversation.id)
    client.responses.create(model=MODEL, input="Again", conversation=conversation.id)
    left = Conversation(items=[Message("user", "Hi"), Message("assistant", "Hello world"), Message("user", "Again")])
    assert fake.bodies(GENERATE)[-1]["token_ids"] == list(qwen_format.render(left))


async def test_websocket_responses_in_a_conversation(stack, fake, tokenizer):
    generated = [*tokenizer.convert_tokens_to_ids(["Hel", "lo", "Ġwor", "ld"]), IM_END]
    fake.queue(Script(generated), Script(ids(tokenizer, "Fine") + [IM_END]))
    client = openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key=ALICE, max_retries=0)
    conversation = await client.conversations.create()
    async with client.responses.connect() as conn:
        for text in ("Greet me", "How are you?"):
            await conn.response.create(model=MODEL, input=text, conversation=conversation.id)
            async for event in conn:
                if event.type in ("response.completed", "response.failed", "error"):
                    assert event.type == "response.completed", event
                    break
    first_prompt, second_prompt = (body["token_ids"] for body in fake.bodies(GENERATE)[-2:])
    assert second_prompt[:len(first_prompt) + len(generated)] == first_prompt + generated
    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    assert [item.content[0].text for item in items] == ["Greet me", "Hello world", "How are you?", "Fine"]


def test_the_conversation_is_echoed_and_store_false_still_appends(fake, stack, tokenizer):
    fake.queue(Script(ids(tokenizer, "Yes") + [IM_END]))
    headers = {"Authorization": f"Bearer {ALICE}"}
    conversation = httpx.post(stack.url + "/v1/conversations", json={}, headers=headers, timeout=10).json()
    answer = httpx.post(stack.url + "/v1/responses", headers=headers, timeout=30, json={
        "model": MODEL, "input": "Ok?", "conversation": conversation["id"], "store": False}).json()
    assert answer["conversation"] == {"id": conversation["id"]}
    listed = httpx.get(f"{stack.url}/v1/conversations/{conversation['id']}/items", headers=headers, timeout=10).json()
    assert [item["role"] for item in listed["data"]] == ["assistant", "user"]
    assert listed["object"] == "list" and listed["first_id"] == listed["data"][0]["id"]
