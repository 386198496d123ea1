"""Codex's tool shapes over HTTP and WebSocket: the real gateway, a scripted vLLM, Codex-style histories.

A custom tool call comes out as `custom_tool_call`, a namespaced call as a function_call with
its `namespace`, reasoning with a sealed `encrypted_content`; echoing those items back (as
Codex does, even without the reasoning `content`) continues the exact tokens of the turn.
"""

from __future__ import annotations

import json

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from gateway.adapters.responses.events import ResponseWriter
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted
from tests.support.apply_patch import APPLY_PATCH_TOOL
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_THINK, END_TOOL_CALL, IM_END, THINK, TOOL_CALL, ids

GENERATE = "/inference/v1/generate"
PATCH = "*** Begin Patch\n*** Add File: a.txt\n+héllo \"quoted\"\n*** End Patch\n"
TOOLS = [
    {"type": "custom", "name": "apply_patch", "description": "Edit files.",
     "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/s"}},
    {"type": "namespace", "name": "multi_agent_v1", "description": "Agents", "tools": [
        {"type": "function", "name": "close_agent", "description": "Close an agent", "strict": False,
         "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}]},
    {"type": "web_search", "external_web_access": False},
]


pytestmark = pytest.mark.stack(fake={"max_model_len": 4096}, reasoning_secret="codex-test")


def post(url: str, body: dict) -> list[dict]:
    with httpx.stream("POST", url + "/v1/responses", json=body) as r:
        assert r.status_code == 200
        return [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]


def codex_body(history: list[dict], key: str) -> dict:
    return {"model": "tiny-qwen3", "input": history, "tools": TOOLS, "tool_choice": "auto", "stream": True,
            "store": False, "include": ["reasoning.encrypted_content"], "prompt_cache_key": key}


def echoed(item: dict) -> dict:
    """An output item as Codex sends it back: a reasoning item may come without `content`."""
    return {k: v for k, v in item.items() if k != "content"} if item["type"] == "reasoning" else item


def test_custom_tool_call_round_trip(stack, tokenizer):
    stack.reset()
    fake, url = stack.fake, stack.url
    thinking = tokenizer.convert_tokens_to_ids(["Hel", "lo", "Ġwor", "ld"])  # not how "Hello world" re-encodes
    assert ids(tokenizer, "Hello world") != thinking
    arguments = json.dumps({"input": PATCH}, ensure_ascii=False)
    generated = [THINK, *thinking, END_THINK, *ids(tokenizer, "\n\n"), TOOL_CALL,
                 *ids(tokenizer, '\n{"name": "apply_patch", "arguments": ' + arguments + "}\n"), END_TOOL_CALL, IM_END]
    fake.queue(Script(generated), Script(ids(tokenizer, "Patched.") + [IM_END]))
    history = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
               {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Add a.txt"}]}]
    events = post(url, codex_body(history, "thread-custom"))

    reasoning, call = events[-1]["response"]["output"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Hello world"}]
    assert isinstance(reasoning["encrypted_content"], str) and "Hello" not in reasoning["encrypted_content"]
    assert call == {"type": "custom_tool_call", "id": call["id"], "call_id": call["call_id"], "name": "apply_patch",
                    "input": PATCH, "status": "completed"}
    assert call["id"].startswith("ctc_") and call["call_id"].startswith("call_")
    call_events = [e for e in events if e.get("item_id") == call["id"] or e.get("item", {}).get("id") == call["id"]]
    added, *deltas, done, _ = call_events
    assert [e["type"] for e in call_events] == ["response.output_item.added",
                                                *["response.custom_tool_call_input.delta"] * len(deltas),
                                                "response.custom_tool_call_input.done", "response.output_item.done"]
    assert added["item"] == {**call, "input": "", "status": "in_progress"}
    assert "".join(delta["delta"] for delta in deltas) == done["input"] == PATCH  # decoded (per read)
    assert done["output_index"] == 1
    assert [e["sequence_number"] for e in events] == list(range(len(events)))

    output = "Success. Updated the following files:\nA a.txt\n"
    history += [echoed(reasoning), call, {"type": "custom_tool_call_output", "call_id": call["call_id"],
                                          "output": output}]
    second = post(url, codex_body(history, "thread-custom"))
    assert second[-1]["response"]["output"][0]["content"][0]["text"] == "Patched."
    first_prompt, second_prompt = (b["token_ids"] for b in fake.bodies(GENERATE)[-2:])
    assert second_prompt[: len(first_prompt) + len(generated)] == first_prompt + generated
    assert second_prompt[len(first_prompt) + len(generated):] == ids(
        tokenizer, f"\n<|im_start|>user\n<tool_response>\n{output}\n</tool_response><|im_end|>\n"
                   "<|im_start|>assistant\n")


def test_namespaced_call_maps_back_and_continues(stack, tokenizer):
    stack.reset()
    fake, url = stack.fake, stack.url
    generated = [TOOL_CALL, *ids(tokenizer, '\n{"name": "multi_agent_v1__close_agent", "arguments": {"id": "a1"}}\n'),
                 END_TOOL_CALL, IM_END]
    fake.queue(Script(generated), Script(ids(tokenizer, "Closed.") + [IM_END]))
    history = [{"type": "message", "role": "user", "content": "Close agent a1"}]
    events = post(url, codex_body(history, "thread-namespace"))
    prompt = fake.bodies(GENERATE)[-1]["token_ids"]
    assert '"name": "multi_agent_v1__close_agent"' in tokenizer.decode(prompt)  # offered flattened
    assert "web_search" not in tokenizer.decode(prompt)
    (call,) = events[-1]["response"]["output"]
    assert call == {"type": "function_call", "id": call["id"], "call_id": call["call_id"], "name": "close_agent",
                    "namespace": "multi_agent_v1", "arguments": '{"id": "a1"}', "status": "completed"}
    *deltas, done = [e for e in events if e.get("item_id") == call["id"]]
    assert {e["type"] for e in deltas} == {"response.function_call_arguments.delta"}
    assert "".join(e["delta"] for e in deltas) == done["arguments"] == call["arguments"]
    assert done["type"] == "response.function_call_arguments.done"

    history += [call, {"type": "function_call_output", "call_id": call["call_id"], "output": "closed"}]
    post(url, codex_body(history, "thread-namespace"))
    first_prompt, second_prompt = (b["token_ids"] for b in fake.bodies(GENERATE)[-2:])
    assert second_prompt[: len(first_prompt) + len(generated)] == first_prompt + generated


async def test_custom_tool_call_over_websocket_continues_with_only_the_output(stack, tokenizer):
    stack.reset()
    fake, url = stack.fake, stack.url
    arguments = json.dumps({"input": PATCH}, ensure_ascii=False)
    generated = [TOOL_CALL, *ids(tokenizer, '\n{"name": "apply_patch", "arguments": ' + arguments + "}\n"),
                 END_TOOL_CALL, IM_END]
    fake.queue(Script(generated), Script(ids(tokenizer, "Patched.") + [IM_END]))
    body = codex_body([{"type": "message", "role": "user", "content": "Add a.txt"}], "thread-ws")
    del body["stream"]
    async with connect(url.replace("http://", "ws://") + "/v1/responses") as ws:
        await ws.send(orjson.dumps({"type": "response.create", **body}).decode())
        first = await until_done(ws)
        (call,) = first[-1]["response"]["output"]
        assert call["type"] == "custom_tool_call" and call["input"] == PATCH
        assert "response.custom_tool_call_input.done" in [e["type"] for e in first]
        output = {"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "ok"}
        await ws.send(orjson.dumps({"type": "response.create", **body, "input": [output],
                                    "previous_response_id": first[-1]["response"]["id"]}).decode())
        second = await until_done(ws)
    assert second[-1]["response"]["output"][0]["content"][0]["text"] == "Patched."
    first_prompt, second_prompt = (b["token_ids"] for b in fake.bodies(GENERATE)[-2:])
    assert second_prompt[: len(first_prompt) + len(generated)] == first_prompt + generated


async def until_done(ws) -> list[dict]:
    events = [orjson.loads(await ws.recv())]
    while events[-1]["type"] not in ("response.completed", "response.incomplete", "response.failed", "error"):
        events.append(orjson.loads(await ws.recv()))
    return events


def test_a_custom_calls_input_streams_decoded_as_the_model_writes_it():
    """Each piece of `{"input": "…"}` the model writes is the input's decoded text so far (escapes
    completed by a later piece wait for it); what never became that shape is sent whole at the end."""
    writer = ResponseWriter(response_id="resp_1", model="m", echo={"tools": [APPLY_PATCH_TOOL]})
    arguments = json.dumps({"input": PATCH}, ensure_ascii=True)
    pieces = [arguments[i:i + 3] for i in range(0, len(arguments), 3)]
    events = writer.on_parse_event(ItemStarted(0, "tool_call", name="apply_patch"))
    for piece in pieces:
        events += writer.on_parse_event(ItemDelta(0, piece))
    events += writer.on_parse_event(ItemDone(0, arguments))
    deltas = [e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    assert len(deltas) > len(pieces) // 2 and "".join(deltas) == PATCH
    assert [e["input"] for e in events if e["type"] == "response.custom_tool_call_input.done"] == [PATCH]

    writer = ResponseWriter(response_id="resp_2", model="m", echo={"tools": [APPLY_PATCH_TOOL]})
    events = writer.on_parse_event(ItemStarted(0, "tool_call", name="apply_patch"))
    events += writer.on_parse_event(ItemDelta(0, '{"patch": "x"}')) + writer.on_parse_event(ItemDone(0, '{"patch": "x"}'))
    assert [(e["type"], e.get("delta", e.get("input"))) for e in events if "custom_tool_call_input" in e["type"]] == [
        ("response.custom_tool_call_input.delta", '{"patch": "x"}'),
        ("response.custom_tool_call_input.done", '{"patch": "x"}')]  # passed on for Codex to reject
