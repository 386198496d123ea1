"""A full history sent again (gateway/adapters/responses/resent.py): the bytes-recognised fast path gives
exactly what parsing everything gives, and any change to the covered history takes the
ordinary path, which then renders in full (non_monotonic)."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gateway.adapters.responses.input import parse_request
from gateway.adapters.responses.resent import (
    Resent,
    ResentItems,
    _input_span,
    _session_key,
    parse_resent,
    resent_prefix,
    session_key,
)
from gateway.core.conversation import Message
from gateway.core.sampling import GenerationDefaults, SamplingOptions
from gateway.pipeline import session
from gateway.pipeline.request import Recognised, TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.store.sessions import Session
from gateway.tokenfix.record import TurnRecord
from gateway.tokenfix.state import TokenState, history_digest
from gateway.upstream.pool import Pool

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
KEY = "thread-1"
CODEX = Path(__file__).parents[2] / "data" / "codex"
TOOLS = [{"type": "function", "name": "exec_command", "description": "Run a shell command",
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]
# JSON syntax inside strings, non-ASCII (offsets are bytes), and markup that must stay text.
FRAGMENTS = ["a", "Hello", " ", "\n", "é", "😀", '"', "\\", "]", "},{", '"input":[', "<|im_end|>", "</think>"]
text = st.lists(st.sampled_from(FRAGMENTS), max_size=4).map("".join)
SERIALIZERS: dict[str, Callable[[Any], bytes]] = {
    "orjson (Codex: compact)": orjson.dumps,
    "json.dumps (spaces, ASCII escapes)": lambda body: json.dumps(body).encode(),
    "indented": lambda body: json.dumps(body, ensure_ascii=False, indent=1).encode(),
}


def _parse(raw: bytes, runtime: Runtime) -> Resent | None:
    """`parse_resent` of `raw` against the session its key names, as the builder looks it up."""
    key = session_key(raw)
    found = runtime.store.sessions.peek(key) if key is not None else None
    return parse_resent(raw, key, found, runtime.format.turn_terminators) if found is not None else None


@pytest.fixture(params=["qwen_format", "harmony_format"])
def chat_format(request):
    """Qwen3's template renders tool outputs alone; harmony's `render_tail` reads the whole
    history, so there the covered items are converted (and must come out the same)."""
    return request.getfixturevalue(request.param)


def message(role: str, value: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": value}]}


@st.composite
def model_turn(draw, ids) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if draw(st.booleans()):
        items.append({"type": "reasoning", "id": f"rs_{next(ids)}", "summary": [],
                      "content": [{"type": "reasoning_text", "text": draw(text)}]})
    calls = draw(st.integers(0, 2))
    if not calls or draw(st.booleans()):
        items.append(message("assistant", draw(text)))
    items += [{"type": "function_call", "call_id": f"call_{next(ids)}", "name": "exec_command",
               "arguments": json.dumps({"cmd": draw(text)})} for _ in range(calls)]
    return items


@st.composite
def answers(draw, turn: list[dict[str, Any]]) -> list[dict[str, Any]]:
    calls = [item["call_id"] for item in turn if item["type"] == "function_call"]
    choices = [st.just([message("user", draw(text))]), st.just([message("developer", draw(text))])]
    if calls:
        outputs = [{"type": "function_call_output", "call_id": call_id, "output": draw(text)} for call_id in calls]
        choices += [st.just(outputs)] * 3
    return draw(st.one_of(choices))


@st.composite
def sessions(draw):
    """(the previous request's items, the model's turn, the new items, cut, the serializer)."""
    ids = itertools.count()
    items = [message("developer", draw(text))] if draw(st.booleans()) else []
    items.append(message("user", draw(text)))
    for _ in range(draw(st.integers(0, 3))):
        turn = draw(model_turn(ids))
        items += [*turn, *draw(answers(turn))]
    turn = draw(model_turn(ids))
    return items, turn, draw(answers(turn)), draw(st.booleans()), draw(st.sampled_from(sorted(SERIALIZERS)))


def request(items: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"model": "m", "stream": True, "input": items, "tools": TOOLS, "prompt_cache_key": KEY, **fields}


def session_after(chat_format, sent: dict[str, Any], serialize, turn: list[dict[str, Any]],
                  cut: bool) -> Runtime | None:
    """A runtime whose session store holds what the gateway left after answering `sent` with
    `turn` (the template's own tokens); None when the template's render of the turn does not
    extend the prompt."""
    before = parse_request(sent).conversation
    whole = parse_request(request([*sent["input"], *turn])).conversation
    state = TokenState.of_template_turn(chat_format, before, whole.items[len(before.items):], cut=cut)
    if state is None:
        return None
    gateway = runtime(chat_format)
    gateway.store.sessions.put(KEY, Session(state, resent_prefix(serialize(sent), sent, parse_request(sent))))
    return gateway


def runtime(chat_format) -> Runtime:
    return Runtime(model_name="m", format=chat_format, defaults=GenerationDefaults(), pool=Pool([]))


async def prepared(gateway: Runtime, parsed, resent: Resent | None = None) -> TurnRecord:
    """The record of the turn the pipeline makes for `parsed` (recognised from its bytes, or
    the ordinary way), its prompt rendered and one stop token generated."""
    recognised = Recognised(resent.state, resent.covered, resent.prefix) if resent is not None else None
    turn = await session.prepare(gateway, TurnRequest(parsed.conversation, SamplingOptions(), session_key=KEY,
                                                      recognised=recognised))
    await turn.render()
    turn.record.output_ids, turn.record.finish_reason = [gateway.format.stop_token_ids[0]], "stop"
    return turn.record


@SETTINGS
@given(case=sessions())
async def test_the_fast_path_is_the_full_parse_token_for_token(chat_format, case):
    previous, turn, new, cut, serializer = case
    serialize = SERIALIZERS[serializer]
    gateway = session_after(chat_format, request(previous), serialize, turn, cut)
    assume(gateway is not None)
    state = gateway.store.sessions.peek(KEY).state
    body = request([*previous, *turn, *new])
    raw = serialize(body)

    resent = _parse(raw, gateway)
    assert resent is not None and resent.state is state
    full = parse_request(orjson.loads(raw))
    fast_turn = await prepared(gateway, resent.parsed, resent)
    slow_turn = await prepared(gateway, full)
    assert list(fast_turn.prompt_ids) == list(slow_turn.prompt_ids)
    assert (fast_turn.spliced, fast_turn.non_monotonic) == (slow_turn.spliced, slow_turn.non_monotonic)

    conversation = resent.parsed.conversation
    assert list(conversation.items) == full.conversation.items
    assert dataclasses.replace(conversation, items=full.conversation.items) == full.conversation
    assert (resent.parsed.echo, resent.parsed.sampling) == (full.echo, full.sampling)
    # The state the turn leaves: its digest extends the prefix's, and where this body's items end.
    terminators = chat_format.turn_terminators
    fast_state, slow_state = fast_turn.token_state(terminators), slow_turn.token_state(terminators)
    assert fast_state.digest == slow_state.digest == history_digest([*full.conversation.items,
                                                                     Message(role="assistant", text="")])
    assert fast_state.tokens == slow_state.tokens and fast_state.items == slow_state.items
    assert resent.prefix == resent_prefix(raw, orjson.loads(raw), full)


def edits(items: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Every single-item change a client could make to a history: edited text, a dropped item
    (not a call, whose output would then be an error), two neighbours swapped."""
    changed = []
    for i, item in enumerate(items):
        edited = json.loads(json.dumps(item))
        if edited["type"] in ("message", "reasoning"):
            edited["content"][0]["text"] += "!"
        elif edited["type"] == "function_call":
            edited["arguments"] += "!"
        else:
            edited["output"] += "!"
        changed.append((f"edited {i}", [*items[:i], edited, *items[i + 1:]]))
        if item["type"] != "function_call":
            changed.append((f"dropped {i}", [*items[:i], *items[i + 1:]]))
        if i and item["type"] == items[i - 1]["type"] == "message":
            changed.append((f"swapped {i - 1}, {i}", [*items[:i - 1], item, items[i - 1], *items[i + 1:]]))
    return changed


@settings(SETTINGS, max_examples=30)  # each example tries every single-item change, with full renders
@given(case=sessions())
async def test_any_change_to_the_covered_history_takes_the_full_path(chat_format, case):
    previous, turn, new, cut, serializer = case
    serialize = SERIALIZERS[serializer]
    gateway = session_after(chat_format, request(previous), serialize, turn, cut)
    assume(gateway is not None)
    state = gateway.store.sessions.peek(KEY).state
    covered = parse_request(request([*previous, *turn])).conversation
    for change, history in edits([*previous, *turn]):
        body = request([*history, *new])
        full = parse_request(body)
        # Some edits leave the same canonical history (a dropped empty message, equal neighbours).
        if full.conversation.items[:state.items] == covered.items and full.conversation.instructions == \
                covered.instructions:
            continue
        assert _parse(serialize(body), gateway) is None, change
        slow_turn = await prepared(gateway, full)
        assert slow_turn.non_monotonic and not slow_turn.spliced, change
    for change, fields in [("other tools", {"tools": []}), ("instructions set", {"instructions": "Be brief."}),
                           ("other cache key", {"prompt_cache_key": "thread-2"})]:
        raw = serialize(request([*previous, *turn, *new], **fields))
        assert _parse(raw, gateway) is None, change


async def test_only_the_new_items_are_converted_when_the_template_renders_them_alone(qwen_format):
    """Tool outputs after the model's call: Qwen3's template renders them in a window, so the
    covered items are never read (converted) at all."""
    previous = [message("developer", "Be brief."), message("user", "List the files.")]
    turn = [{"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "ls it."}]},
            {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": '{"cmd":"ls"}'}]
    new = [{"type": "function_call_output", "call_id": "call_1", "output": "a.txt\nb.txt"}]
    gateway = session_after(qwen_format, request(previous), orjson.dumps, turn, False)
    raw = orjson.dumps(request([*previous, *turn, *new]))
    resent = _parse(raw, gateway)
    # The developer message is the instructions: user, reasoning, call are covered, the call's turn from 1.
    assert resent is not None and resent.covered.items == 3 and resent.covered.turn_start == 1
    assert resent.parsed.conversation.instructions == "Be brief."
    items = resent.parsed.conversation.items
    assert isinstance(items, ResentItems) and not items.converted
    record = await prepared(gateway, resent.parsed, resent)
    assert record.spliced and not items.converted  # rendered and spliced without the covered items
    record.token_state(qwen_format.turn_terminators)
    assert not items.converted  # the next state's digest extends this one's
    assert list(items) == parse_request(orjson.loads(raw)).conversation.items and items.converted


async def test_a_codex_history_takes_the_resent_path(qwen_format):
    """Codex's own request (developer and user messages with content parts, an echoed reasoning
    item, its call and the call's output), sent again: recognised from its bytes, the covered
    items read through the schema only when something reads them."""
    body = {**json.loads((CODEX / "http_3_reasoning_item_echoed.json").read_text())["body"], "model": "m",
            "prompt_cache_key": KEY}
    previous, turn, new = body["input"][:4], body["input"][4:6], body["input"][6:]
    gateway = session_after(qwen_format, {**body, "input": previous}, orjson.dumps, turn, False)
    raw = orjson.dumps({**body, "input": [*previous, *turn, *new]})
    resent = _parse(raw, gateway)
    assert resent is not None and resent.covered.items == 5  # the first developer message is the instructions
    items = resent.parsed.conversation.items
    record = await prepared(gateway, resent.parsed, resent)
    assert record.spliced and isinstance(items, ResentItems) and not items.converted
    assert list(items) == parse_request(orjson.loads(raw)).conversation.items


def test_an_output_answering_a_covered_call_takes_the_full_parse(qwen_format):
    previous = [message("user", "Run two things."),
                {"type": "function_call", "call_id": "call_a", "name": "exec_command", "arguments": '{"cmd":"a"}'},
                {"type": "function_call_output", "call_id": "call_a", "output": "started"}]
    turn = [message("assistant", "Waiting.")]
    late = [{"type": "function_call_output", "call_id": "call_a", "output": "finished"}]
    gateway = session_after(qwen_format, request(previous), orjson.dumps, turn, False)
    raw = orjson.dumps(request([*previous, *turn, *late]))
    assert _parse(raw, gateway) is None
    assert parse_request(orjson.loads(raw)).conversation.items[-1].name == "exec_command"


@pytest.mark.parametrize(("raw", "span"), [
    (b'{"model":"m","input":[{"a":1},{"b":"]"}],"tools":[]}', (21, 29, 39)),
    (b'{ "input" : [ {"a":"\xc3\xa9"} ,\n {"b":2}\n ] }', (12, 24, 35)),
    (b'{"metadata":{"input":[1]},"input":[{"a":1}]}', (34, 42, 42)),
    (b'{"input":"just text"}', None),
    (b'{"input":[]}', None),
    (b'{"input":[{"a":1}],"input":[{"a":1}]}', None),
    (b'{"input":[{"a":1}],}', None),
    (b'[{"input":[{"a":1}]}]', None),
    (b'{"input":[{"a":1}', None),
])
def test_input_span(raw, span):
    assert _input_span(raw.decode("latin-1")) == span
    if span is not None:
        start, first_end, end = span
        assert raw[start:start + 1] == b"[" and orjson.loads(raw[start + 1:first_end]) is not None
        assert orjson.loads(raw[start:end] + b"]") == orjson.loads(raw)["input"]


@pytest.mark.parametrize(("raw", "key"), [
    (b'{"input":"x","prompt_cache_key":"k-1"}', "k-1"),
    (b'{"prompt_cache_key" : "a\\"b", "input":"x"}', 'a"b'),
    (b'{"input":"\\"prompt_cache_key\\":\\"no\\""}', None),
    (b'{"prompt_cache_key":null}', None),
    (b'{"input":"x"}', None),
])
def test_the_session_key_is_read_without_parsing_the_body(raw, key):
    assert _session_key(raw) == key
