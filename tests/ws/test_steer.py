"""WebSocket `response.steer`: the real gateway, the real openai SDK, a scripted vLLM.

The shapes are OpenAI's, as openai-python 3.57 (the SDK these tests drive) types them from
OpenAI's OpenAPI description: the client event `ResponseSteerEvent` (`type`,
`previous_response_id`, `input` only) sent by `connection.response.steer(...)`; the server events
`ResponseSteerAcceptedEvent` (`steer: {id, previous_response_id}`), `ResponseSteerPendingEvent`
(`reason: "waiting_for_required_input"`, `required_input` stubs), `ResponseSteerFailedEvent`
(`steer: {id?, previous_response_id, input}`, `error: {type: "invalid_request_error", code,
message}`) with `ResponseSteerErrorCode`'s codes; `Response.incomplete_details.reason: "steered"`.
The flow (a steered response ends `response.incomplete`/`steered`, then a successor
`response.created` continues it with the queued input; client tool calls keep the input queued
until the next `response.create` of that parent, which gets it prepended) is the one OpenAI's
"Mid-turn steering" guide describes.

What the gateway adds, asserted on the exact ids sent upstream: the steered generation stops at
the ids the client was shown (the upstream request aborted), and the successor's prompt is the
first prompt, those exact ids, then the template's close of that turn and the steering user turn.
"""

from __future__ import annotations

import threading

import openai
import orjson
import pytest
from websockets.asyncio.client import connect

from gateway.core.conversation import Conversation, Message, ToolCall
from gateway.formats.hf.format import load_hf_format
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, TOOL_CALL, ids
from tests.support.waiting import async_wait_for

GENERATE = "/inference/v1/generate"
MODEL = "tiny-qwen3"
ENDS = ("response.completed", "response.incomplete", "response.failed", "error")

pytestmark = pytest.mark.stack(fake={"model": MODEL})


@pytest.fixture(scope="module")
def chat_format(qwen_tokenizer_dir):
    return load_hf_format(qwen_tokenizer_dir)


@pytest.fixture
def client(stack):
    return openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture
def ws_url(stack):
    return stack.url.replace("http://", "ws://") + "/v1/responses"


def prompts(fake: FakeVLLM) -> list[list[int]]:
    return [body["token_ids"] for body in fake.bodies(GENERATE)]


def engine_id(fake: FakeVLLM, i: int) -> str:
    return "generate-tokens-" + fake.bodies(GENERATE)[i]["request_id"]


def after_turn(chat_format, items: list, turn: int) -> list[int]:
    """The template's render of `items` from the terminator of the `turn`-th message on: what
    follows a model's exact tokens for that turn (its close, the next turns, the generation prompt)."""
    rendered = chat_format.render(Conversation(items=items))
    ends = [i for i, token in enumerate(rendered) if token == IM_END]
    return rendered[ends[turn]:]


async def test_steer_stops_at_the_exact_ids_and_the_successor_continues_them(fake, client, tokenizer, chat_format):
    story = ids(tokenizer, "Once upon a time there was a very long story")
    fake.queue(Script(story, stall_after=4), Script(ids(tokenizer, "Short.") + [IM_END]))
    async with client.responses.connect() as conn:
        await conn.response.create(model=MODEL, input="Tell a story.", max_output_tokens=64)
        events, shown = [], ""
        async for event in conn:  # the replica stalls after 4 tokens (the gateway may coalesce their deltas)
            events.append(event)
            shown += event.delta if event.type == "response.output_text.delta" else ""
            if shown == tokenizer.decode(story[:4]):
                break
        first = events[0].response.id
        await conn.response.steer(previous_response_id=first, input="Keep it short.")
        n_ends = 0
        async for event in conn:
            events.append(event)
            n_ends += event.type in ENDS
            if n_ends == 2:
                break
    kinds = [event.type for event in events if event.type != "response.output_text.delta"]
    stream = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    close = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert kinds == [*stream, "response.steer.accepted", *close, "response.incomplete", *stream, *close,
                     "response.completed"]
    steered_at = next(i for i, event in enumerate(events) if event.type == "response.incomplete")
    accepted = next(event for event in events if event.type == "response.steer.accepted")
    steered, successor = events[steered_at].response, events[-1].response
    assert accepted.steer.previous_response_id == first and accepted.steer.id.startswith("steer")
    # numbered in the steered response's sequence, after what it had sent
    assert accepted.sequence_number == events[events.index(accepted) - 1].sequence_number + 1
    assert (steered.id, steered.status, steered.incomplete_details.reason) == (first, "incomplete", "steered")
    partial = story[:4]
    assert steered.output_text == tokenizer.decode(partial) and steered.usage.output_tokens == 4
    assert events[steered_at + 1].response.previous_response_id == first and successor.id != first
    assert successor.output_text == "Short." and successor.max_output_tokens == 64  # its settings inherited

    # upstream: the steered generation aborted; the successor continues its exact ids
    await async_wait_for(lambda: engine_id(fake, 0) in fake.aborted, "the steered generation was aborted")
    first_prompt, second_prompt = prompts(fake)
    history = [Message(role="user", text="Tell a story."), Message(role="assistant", text=tokenizer.decode(partial)),
               Message(role="user", text="Keep it short.")]
    assert second_prompt == first_prompt + partial + after_turn(chat_format, history, 1)


async def test_steer_failures_keep_the_connection(fake, ws_url, tokenizer):
    fake.queue(Script(ids(tokenizer, "Done.") + [IM_END]), Script(ids(tokenizer, "Again.") + [IM_END]))
    async with connect(ws_url) as ws:
        async def steer(**fields) -> dict:
            await ws.send(orjson.dumps({"type": "response.steer", **fields}).decode())
            return orjson.loads(await ws.recv())

        failed = await steer(previous_response_id="resp_nope", input="hi")
        assert failed == {"type": "response.steer.failed", "sequence_number": 0,
                          "steer": {"previous_response_id": "resp_nope", "input": "hi"},
                          "error": {"type": "invalid_request_error", "code": "response_not_found",
                                    "message": "No response with id 'resp_nope' is in progress on this connection."}}
        await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "hi"}).decode())
        done = [orjson.loads(await ws.recv()) for _ in range(4)]
        while done[-1]["type"] != "response.completed":
            done.append(orjson.loads(await ws.recv()))
        finished = done[-1]["response"]["id"]
        late = await steer(previous_response_id=finished, input="more")
        assert late["error"]["code"] == "response_already_completed" and "id" not in late["steer"]
        # only user messages, only the three fields (no stream_id: the response names its lane)
        for fields in ({"previous_response_id": finished, "input": [{"role": "assistant", "content": "x"}]},
                       {"previous_response_id": finished, "input": []},
                       {"previous_response_id": finished, "input": "x", "stream_id": "a"},
                       {"input": "x"}):
            refused = await steer(**fields)
            assert refused["type"] == "response.steer.failed" and refused["error"]["code"] == "invalid_input", fields
            assert refused["steer"]["input"] == fields["input"]
        # the connection goes on: the finished response is still continuable
        await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "again",
                                    "previous_response_id": finished}).decode())
        event = orjson.loads(await ws.recv())
        while event["type"] not in ENDS:
            event = orjson.loads(await ws.recv())
        assert event["type"] == "response.completed" and event["response"]["output"][0]["content"][0]["text"] == "Again."


async def test_a_steer_inside_a_tool_call_waits_for_its_end_and_its_output(fake, ws_url, tokenizer, chat_format):
    """Half a call's arguments is a call nobody can run: the steer stops the turn where the call ends;
    the call's output is the client's, so the steer waits (`response.steer.pending`) and is prepended
    to the `response.create` that brings it."""
    tools = [{"type": "function", "name": "exec_command", "description": "Run a command",
              "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]
    # a text, then a call's opening: the text's delta shows the gateway has read into the call
    opening = [*ids(tokenizer, "Let me check."), TOOL_CALL, *ids(tokenizer, '\n{"name": "exec_command", '
                                                                          '"arguments": {"cmd": "')]
    rest = [*ids(tokenizer, 'pwd"}}\n'), END_TOOL_CALL]
    after = ids(tokenizer, "never sent")
    # stalls inside the call until the steer was accepted, then writes the rest and more
    resume = threading.Event()
    fake.queue(Script([*opening, *rest, *after, IM_END], chunks=[len(opening), len(rest), len(after), 1],
                      stall_after=1, stall_until=resume),
               Script(ids(tokenizer, "In /tmp, briefly.") + [IM_END]))
    async with connect(ws_url) as ws:
        await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "where am I?",
                                    "tools": tools}).decode())
        events = [orjson.loads(await ws.recv())]
        while events[-1]["type"] != "response.output_text.delta":
            events.append(orjson.loads(await ws.recv()))
        first = events[0]["response"]["id"]
        await ws.send(orjson.dumps({"type": "response.steer", "previous_response_id": first,
                                    "input": "Be brief."}).decode())
        while events[-1]["type"] != "response.steer.accepted":
            events.append(orjson.loads(await ws.recv()))
        resume.set()
        while events[-1]["type"] != "response.steer.pending":
            events.append(orjson.loads(await ws.recv()))
        kinds = [event["type"] for event in events]
        assert "response.steer.accepted" in kinds and kinds[-2] == "response.incomplete", [(e["type"], e.get("delta"), e.get("item", {}).get("type")) for e in events]
        ended = events[-2]["response"]
        assert ended["incomplete_details"] == {"reason": "steered"}
        message, call = ended["output"]
        assert message["content"][0]["text"] == "Let me check."
        assert (call["type"], call["name"], call["arguments"]) == ("function_call", "exec_command", '{"cmd": "pwd"}')
        assert events[-1]["reason"] == "waiting_for_required_input" and events[-1]["required_input"] == [
            {"type": "function_call_output", "call_id": call["call_id"], "name": "exec_command"}]
        assert len(prompts(fake)) == 1  # no successor before the call's output

        await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "previous_response_id": first,
                                    "input": [{"type": "function_call_output", "call_id": call["call_id"],
                                               "output": "/tmp"}]}).decode())
        event = orjson.loads(await ws.recv())
        while event["type"] not in ENDS:
            event = orjson.loads(await ws.recv())
    assert event["type"] == "response.completed"
    first_prompt, second_prompt = prompts(fake)
    history = [Message(role="user", text="where am I?"), Message(role="assistant", text="Let me check."),
               ToolCall(call_id=call["call_id"], name="exec_command", arguments='{"cmd": "pwd"}'),
               Message(role="user", text="Be brief.")]
    head = first_prompt + opening + rest
    assert second_prompt[:len(head)] == head  # the call's exact ids, nothing the model wrote after it
    tail = tokenizer.decode(second_prompt[len(head):])
    assert tail.index("Be brief.") < tail.index("/tmp")  # the queued steer first, then the tool output
    assert after_turn(chat_format, history, 1)[0] == second_prompt[len(head)]  # the template closes the turn


async def test_a_steer_before_the_first_token_closes_an_empty_turn(fake, ws_url, tokenizer, chat_format):
    fake.queue(Script(ids(tokenizer, "never shown"), stall_after=0), Script(ids(tokenizer, "Hi.") + [IM_END]))
    async with connect(ws_url) as ws:
        await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "hello"}).decode())
        first = orjson.loads(await ws.recv())["response"]["id"]  # response.created: the replica accepted
        await ws.send(orjson.dumps({"type": "response.steer", "previous_response_id": first,
                                    "input": [{"role": "user", "content": [{"type": "input_text",
                                                                            "text": "Say hi."}]}]}).decode())
        events = []
        while sum(event["type"] in ENDS for event in events) < 2:
            events.append(orjson.loads(await ws.recv()))
    steered, successor = (event["response"] for event in events if event["type"] in ENDS)
    assert (steered["status"], steered["output"], steered["usage"]["output_tokens"]) == ("incomplete", [], 0)
    assert successor["status"] == "completed" and successor["previous_response_id"] == first
    first_prompt, second_prompt = prompts(fake)
    history = [Message(role="user", text="hello"), Message(role="assistant", text=""),
               Message(role="user", text="Say hi.")]
    assert second_prompt == first_prompt + after_turn(chat_format, history, 1)


async def test_a_successor_that_cannot_be_made_fails_the_steer_with_its_id(fake, ws_url, tokenizer):
    fake.queue(Script(ids(tokenizer, "a b c d e"), stall_after=2))
    steer_input = [{"type": "message", "role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]
    async with connect(ws_url) as ws:
        await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "hello"}).decode())
        events = [orjson.loads(await ws.recv())]
        while events[-1]["type"] != "response.output_text.delta":
            events.append(orjson.loads(await ws.recv()))
        first = events[0]["response"]["id"]
        await ws.send(orjson.dumps({"type": "response.steer", "previous_response_id": first,
                                    "input": steer_input}).decode())
        while events[-1]["type"] != "response.steer.failed":
            events.append(orjson.loads(await ws.recv()))
    accepted = next(event for event in events if event["type"] == "response.steer.accepted")
    ended = next(event for event in events if event["type"] == "response.incomplete")
    failed = events[-1]
    assert ended["response"]["incomplete_details"] == {"reason": "steered"}
    assert failed["steer"] == {"id": accepted["steer"]["id"], "previous_response_id": first, "input": steer_input}
    assert failed["error"]["code"] == "successor_creation_failed" and failed["error"]["message"]
    assert len(prompts(fake)) == 1
