"""WebSocket mode on /v1/responses: the real gateway, the real openai SDK, a scripted vLLM.

Codex's flow (captured frames in tests/data/codex/ws_*.json): a `generate: false` warmup
with the base prompt, a turn continuing it by `previous_response_id`, then the tool
output alone. The gateway keeps the history and the exact tokens itself, so each
continuation's prompt must begin with exactly the ids the model saw and produced.
"""

from __future__ import annotations

import json
from pathlib import Path

import openai
import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from gateway.adapters.responses.input import parse_request
from gateway.core.conversation import Conversation, Message, Tool
from gateway.core.settings import Settings
from gateway.formats.hf.format import load_hf_format
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.gateway_server import running_gateway
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, TOOL_CALL, ids
from tests.support.waiting import async_wait_for

GENERATE = "/inference/v1/generate"
MODEL = "tiny-qwen3"
CAPTURES = Path(__file__).parents[1] / "data" / "codex"


@pytest.fixture(scope="module")
def chat_format(qwen_tokenizer_dir):
    return load_hf_format(qwen_tokenizer_dir)


pytestmark = pytest.mark.stack(fake={"model": MODEL})


@pytest.fixture
def url(stack):
    return stack.url


@pytest.fixture
def client(url):
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def capture(name: str) -> dict:
    frame = json.loads((CAPTURES / name).read_text())
    frame["model"] = MODEL
    return frame


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/v1/responses"


async def until_done(conn) -> list:
    """Events up to the end of one response (or an error), as SDK objects."""
    events = []
    async for event in conn:
        events.append(event)
        if event.type in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events
    raise AssertionError("the connection closed mid-response")


async def raw_events(ws, count: int) -> list[dict]:
    return [orjson.loads(await ws.recv()) for _ in range(count)]


async def raw_until_done(ws) -> list[dict]:
    events = []
    while True:
        events.append(orjson.loads(await ws.recv()))
        if events[-1]["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events


def generate_bodies(fake: FakeVLLM) -> list[dict]:
    return fake.bodies(GENERATE)


# -- the Codex flow ----------------------------------------------------------------------

async def test_codex_frames_continue_from_the_exact_cached_tokens(fake, url, tokenizer, chat_format):
    warmup, turn, tool_turn = (capture(f) for f in ("ws_1_prewarm_generate_false.json",
                                                    "ws_2_turn_with_previous_response_id.json",
                                                    "ws_3_tool_output_incremental.json"))
    # The model writes the argument "ls -la" with non-canonical token splits: only reusing
    # its exact ids (not re-tokenizing the history) keeps the next prompt on-policy.
    odd = tokenizer.convert_tokens_to_ids(["l", "s", "Ġ", "-", "la"])
    assert tokenizer.decode(odd) == "ls -la" and ids(tokenizer, "ls -la") != odd
    call = [TOOL_CALL, *ids(tokenizer, '\n{"name": "exec_command", "arguments": {"cmd": "'), *odd,
            *ids(tokenizer, '"}}\n'), END_TOOL_CALL, IM_END]
    fake.queue(Script(call, stop_reason=IM_END), Script(ids(tokenizer, "Wrote it.") + [IM_END]))

    async with connect(ws_url(url), additional_headers={"openai-beta": "responses_websockets=2026-02-06",
                                                         "Authorization": "Bearer sk-stub"}) as ws:
        assert "permessage-deflate" in ws.response.headers["Sec-WebSocket-Extensions"]
        await ws.send(orjson.dumps(warmup).decode())
        events = await raw_until_done(ws)
        # Codex's turn state first (a new turn holds none): the token its next frames send back.
        assert [e["type"] for e in events] == ["response.metadata", "response.created", "response.in_progress",
                                               "response.completed"]
        turn_state = events[0]["headers"]["x-codex-turn-state"]
        assert events[0] == {"type": "response.metadata", "headers": {"x-codex-turn-state": turn_state}}
        warm = events[-1]["response"]
        assert warm["output"] == [] and warm["usage"]["output_tokens"] == 0
        base = warmup["input"][0]["content"][0]["text"]
        assert warm["usage"]["input_tokens"] == len(chat_format.render(
            Conversation(items=[], instructions=base, tools=_function_tools(warmup["tools"]))))
        assert generate_bodies(fake) == []  # a warmup generates nothing

        held = {**turn["client_metadata"], "x-codex-turn-state": turn_state}  # Codex replays the turn's token
        await ws.send(orjson.dumps({**turn, "previous_response_id": warm["id"], "client_metadata": held}).decode())
        events = await raw_until_done(ws)
        assert events[0] == {"type": "response.metadata", "headers": {"x-codex-turn-state": turn_state}}
        first = events[-1]["response"]
        assert first["status"] == "completed" and first["previous_response_id"] == warm["id"]
        (function_call,) = first["output"]
        assert function_call["type"] == "function_call" and json.loads(function_call["arguments"]) == {
            "cmd": "ls -la"}
        first_prompt = generate_bodies(fake)[-1]["token_ids"]
        # The continuation's history: the base prompt, then the new developer and user messages
        # (a leading developer message of a continuation stays a message, not the instructions).
        texts = ["".join(part["text"] for part in item["content"]) for item in turn["input"]]
        roles = [item["role"] for item in turn["input"]]
        history = Conversation(items=[Message(role=r, text=t) for r, t in zip(roles, texts)], instructions=base,
                               tools=_function_tools(turn["tools"]))
        assert first_prompt == chat_format.render(history)

        output = tool_turn["input"][0]["output"]
        tool_turn["input"][0]["call_id"] = function_call["call_id"]
        await ws.send(orjson.dumps({**tool_turn, "previous_response_id": first["id"]}).decode())
        events = await raw_until_done(ws)
        assert events[-1]["type"] == "response.completed", events[-1]
        assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Wrote it."

    second_prompt = generate_bodies(fake)[-1]["token_ids"]
    cached = first_prompt + call
    assert second_prompt[: len(cached)] == cached
    tail = second_prompt[len(cached):]
    assert tokenizer.decode(tail) == (f"\n<|im_start|>user\n<tool_response>\n{output}\n</tool_response><|im_end|>\n"
                                      f"<|im_start|>assistant\n")


async def test_only_codex_frames_get_the_turn_state_event(fake, url, tokenizer):
    """A frame without Codex's `client_metadata` (any other client's) starts with response.created."""
    fake.queue(Script(ids(tokenizer, "Hi") + [IM_END]))
    async with connect(ws_url(url)) as ws:
        await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "hi",
                                    "client_metadata": {"user": "me"}}).decode())
        events = await raw_until_done(ws)
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"


def _function_tools(raw: list[dict]) -> list[Tool]:
    """The functions the model is offered: Codex's namespace tools flattened (codex_tools)."""
    return parse_request({"model": MODEL, "input": "x", "tools": raw}).conversation.tools


async def test_sdk_chain_keeps_tools_and_history_when_the_continuation_omits_them(fake, client, tokenizer):
    tools = [{"type": "function", "name": "exec_command", "description": "Run a command",
              "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]
    call = [TOOL_CALL, *ids(tokenizer, '\n{"name": "exec_command", "arguments": {"cmd": "pwd"}}\n'), END_TOOL_CALL,
            IM_END]
    fake.queue(Script(call), Script(ids(tokenizer, "/tmp") + [IM_END]))
    async with client.responses.connect() as conn:
        await conn.response.create(model=MODEL, instructions="Be terse.", input="where am I?", tools=tools)
        first = (await until_done(conn))[-1].response
        await conn.response.create(model=MODEL, previous_response_id=first.id, input=[
            {"type": "function_call_output", "call_id": first.output[0].call_id, "output": "/tmp"}])
        events = await until_done(conn)
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "/tmp"
    first_prompt, second_prompt = (body["token_ids"] for body in generate_bodies(fake))
    assert second_prompt[: len(first_prompt) + len(call)] == first_prompt + call
    # same system turn (instructions and tools carried over), the tool result by name
    assert tokenizer.decode(second_prompt).count("Be terse.") == 1
    assert "exec_command" in tokenizer.decode(first_prompt[: first_prompt.index(IM_END)])


# -- cache misses and failures -----------------------------------------------------------

async def test_unknown_previous_response_id_keeps_the_connection(fake, client, tokenizer):
    fake.queue(Script(ids(tokenizer, "fresh") + [IM_END]))
    async with client.responses.connect() as conn:
        await conn.response.create(model=MODEL, previous_response_id="resp_nope", input="hi")
        (error,) = await until_done(conn)
        assert error.type == "error" and error.status == 400
        assert (error.error.type, error.error.code, error.error.param) == (
            "invalid_request_error", "previous_response_not_found", "previous_response_id")
        assert "resp_nope" in error.error.message
        await conn.response.create(model=MODEL, input="hi")
        assert (await until_done(conn))[-1].response.output_text == "fresh"


async def test_failed_turn_evicts_its_lane(fake, url, tokenizer):
    fake.queue(Script(ids(tokenizer, "ok") + [IM_END]), Script(ids(tokenizer, "broken reply") + [IM_END],
                                                               error_after=1))
    async with connect(ws_url(url)) as ws:
        # store: false — a stored response could still be continued from the gateway's store
        await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "one",
                                    "store": False}).decode())
        good = (await raw_until_done(ws))[-1]["response"]
        await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "two", "store": False,
                                    "previous_response_id": good["id"]}).decode())
        failed = (await raw_until_done(ws))[-1]
        error = failed["response"]["error"]  # OpenAI's ResponseErrorCode; the gateway's own code leads the message
        assert failed["type"] == "response.failed" and error["code"] == "server_error"
        assert error["message"].startswith("upstream_error: ")
        for response_id in (good["id"], failed["response"]["id"]):
            await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "three",
                                        "previous_response_id": response_id}).decode())
            (error,) = await raw_events(ws, 1)
            assert error["error"]["code"] == "previous_response_not_found"


@pytest.mark.parametrize(("frame", "code", "param"), [
    (b"{not json", "invalid_json", None),
    (b"[1, 2]", "invalid_json", None),
    (b'{"type": "response.cancel"}', "unknown_event_type", "type"),
    (b'{"model": "tiny-qwen3", "input": "x"}', "unknown_event_type", "type"),
    (b'{"type": "response.create", "model": "tiny-qwen3", "input": "x", "background": true}',
     "unsupported_parameter", "background"),
    (b'{"type": "response.create", "model": "tiny-qwen3", "input": "x", "stream_id": "bad id!"}',
     "invalid_value", "stream_id"),
    (b'{"type": "response.create", "model": "tiny-qwen3", "input": "x", "generate": "no"}',
     "invalid_type", "generate"),
    (b'{"type": "response.create", "model": "tiny-qwen3", "input": ""}', "empty_input", "input"),
    (b'{"type": "response.create", "model": "tiny-qwen3", "input": "x", "temperature": "hot"}',
     "invalid_type", "temperature"),
    (b'{"type": "response.create", "model": "gpt-4", "input": "x"}', "model_not_found", "model"),
])
async def test_bad_frames_get_one_nested_error_and_the_connection_stays(fake, url, tokenizer, frame, code, param):
    fake.queue(Script(ids(tokenizer, "still here") + [IM_END]))
    async with connect(ws_url(url)) as ws:
        await ws.send(frame.decode())
        (error,) = await raw_events(ws, 1)
        assert error["type"] == "error" and error["error"]["code"] == code and error["error"]["param"] == param
        assert error["status"] == (404 if code == "model_not_found" else 400) and error["error"]["message"]
        await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "x"}).decode())
        assert (await raw_until_done(ws))[-1]["type"] == "response.completed"


async def test_errors_about_a_lane_carry_its_stream_id(url):
    async with connect(ws_url(url)) as ws:
        await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "x", "stream_id": "a.1",
                                    "previous_response_id": "resp_gone"}).decode())
        (error,) = await raw_events(ws, 1)
        assert error["stream_id"] == "a.1" and error["error"]["code"] == "previous_response_not_found"


# -- lanes -------------------------------------------------------------------------------

async def test_lanes_run_side_by_side_fifo_within_a_lane_and_die_with_the_socket(fake, client, tokenizer):
    fake.queue(Script(ids(tokenizer, "never ending"), hang=True),
               Script(ids(tokenizer, "b one") + [IM_END]), Script(ids(tokenizer, "b two") + [IM_END]))
    seen: list = []
    async with client.responses.connect() as conn:
        await conn.response.create(model=MODEL, input="slow", stream_id="a")
        async for event in conn:  # lane a is generating (and will not finish)
            seen.append(event)
            if event.type == "response.output_text.delta":
                break
        await conn.response.create(model=MODEL, input="first", stream_id="b")
        await conn.response.create(model=MODEL, input="second", stream_id="b")
        completed = 0
        async for event in conn:
            seen.append(event)
            completed += event.type == "response.completed"
            if completed == 2:
                break
        hanging = generate_bodies(fake)[0]["request_id"]
    lane_b = [e for e in seen if e.stream_id == "b"]
    assert {e.stream_id for e in seen} == {"a", "b"}
    kinds = [(e.type, getattr(getattr(e, "response", None), "output_text", None)) for e in lane_b
             if e.type in ("response.created", "response.completed")]
    assert kinds == [("response.created", ""), ("response.completed", "b one"),
                     ("response.created", ""), ("response.completed", "b two")]
    assert not any(e.type == "response.completed" for e in seen if e.stream_id == "a")
    # closing the socket cancelled lane a's turn, which let go of its upstream request
    engine_id = f"generate-tokens-{hanging}"
    await async_wait_for(lambda: engine_id in fake.aborted and engine_id in fake.disconnected,
                         "lane a's generation was closed and aborted")


async def test_a_full_lane_refuses_with_concurrent_request(fake, url, tokenizer):
    fake.queue(Script(ids(tokenizer, "stuck"), hang=True))
    create = {"type": "response.create", "model": MODEL, "input": "x", "stream_id": "only"}
    async with connect(ws_url(url)) as ws:
        await ws.send(orjson.dumps(create).decode())
        while orjson.loads(await ws.recv())["type"] != "response.output_text.delta":
            pass
        for _ in range(15):  # queued behind the running one: 16 on the lane
            await ws.send(orjson.dumps(create).decode())
        await ws.send(orjson.dumps(create).decode())
        event = orjson.loads(await ws.recv())
        while event["type"] == "response.output_text.delta":
            event = orjson.loads(await ws.recv())
        assert event["type"] == "error" and event["error"]["code"] == "concurrent_request"
        assert event["stream_id"] == "only" and event["status"] == 400
    assert len(generate_bodies(fake)) == 1
    engine_id = "generate-tokens-" + generate_bodies(fake)[0]["request_id"]
    await async_wait_for(lambda: engine_id in fake.aborted, "closing the socket aborted the running turn")


async def test_disconnect_cancels_the_upstream_request(fake, client, tokenizer):
    fake.queue(Script(ids(tokenizer, "a b c"), hang=True))
    async with client.responses.connect() as conn:
        await conn.response.create(model=MODEL, input="x")
        async for event in conn:
            if event.type == "response.output_text.delta":
                break
    engine_id = "generate-tokens-" + generate_bodies(fake)[-1]["request_id"]
    await async_wait_for(lambda: engine_id in fake.aborted and engine_id in fake.disconnected,
                         "the replica saw the stream closed and the abort")
    assert engine_id not in fake.completed


# -- connection limits -------------------------------------------------------------------

@pytest.fixture
def limited_url(fake, qwen_tokenizer_dir):
    settings = Settings(model=str(qwen_tokenizer_dir), upstreams=[fake.url], max_websocket_connections=1,
                        websocket_lifetime=1.0, websocket_warning=0.5)
    with running_gateway(settings) as url:
        yield url


async def test_connections_past_the_cap_are_refused_with_1013(limited_url):
    async with connect(ws_url(limited_url)) as first:
        async with connect(ws_url(limited_url)) as second:
            (error,) = await raw_events(second, 1)
            assert error["error"]["code"] == "websocket_connection_limit_reached" and error["status"] == 400
            with pytest.raises(ConnectionClosed) as closed:
                await second.recv()
            assert closed.value.rcvd.code == 1013
        assert (await raw_events(first, 1))[0]["type"] == "connection_expiring"  # the first is unaffected


async def test_lifetime_warns_then_closes(limited_url, fake, tokenizer):
    fake.queue(Script(ids(tokenizer, "too slow"), hang=True))
    async with connect(ws_url(limited_url)) as ws:
        await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "x"}).decode())
        events = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                events.append(orjson.loads(await ws.recv()))
        assert closed.value.rcvd.code == 1000
    assert events[-1]["type"] == "error"  # the unfinished response sends nothing after it
    warning, error = (e for e in events if not e["type"].startswith("response."))
    assert warning["expires_in_seconds"] == 0.5 and warning["connection_id"].startswith("ws_")
    assert error["error"]["code"] == "websocket_connection_limit_reached"
    request_id = generate_bodies(fake)[-1]["request_id"]  # the in-flight turn was cancelled with the socket
    engine_id = f"generate-tokens-{request_id}"
    await async_wait_for(lambda: engine_id in fake.aborted and engine_id in fake.disconnected,
                         "the cancelled turn's generation was closed and aborted")


async def test_stored_response_continues_on_another_connection(fake, url, tokenizer):
    generated = ids(tokenizer, "stored") + [IM_END]
    fake.queue(Script(generated), Script(ids(tokenizer, "again") + [IM_END]))
    async with connect(ws_url(url)) as ws:
        await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "one",
                                    "store": True}).decode())
        first = (await raw_until_done(ws))[-1]["response"]
    async with connect(ws_url(url)) as ws:
        await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "two",
                                    "previous_response_id": first["id"]}).decode())
        second = (await raw_until_done(ws))[-1]
    assert second["type"] == "response.completed"
    first_prompt, second_prompt = (b["token_ids"] for b in fake.bodies(GENERATE)[-2:])
    assert second_prompt[: len(first_prompt) + len(generated)] == first_prompt + generated
