"""Mistral output: tekken ids in, reasoning / text / tool-call items out. v11+ `[TOOL_CALLS]NAME[ARGS]{json}`
(v11 also `[CALL_ID]ID`) streamed as written, as vLLM's `mistral` parser reads it; the pre-v11 JSON list;
Magistral's `[THINK]` reasoning; malformed markup degrades to text."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.conversation import Tool
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted
from gateway.formats.mistral.format import load_mistral_format
from tests.support.family_contract import READ
from tests.support.mistral import IDS, tekken_file
from tests.support.parse_events import feed, items

SHELL = Tool("shell", "Run a command.", {"type": "object", "properties": {
    "command": {"type": "array", "items": {"type": "string"}}, "timeout_ms": {"type": "integer"}}})
TOOLS = [SHELL, READ]
_MARKUP = re.compile("(" + "|".join(map(re.escape, sorted(IDS, key=len, reverse=True))) + ")")


def ids_of(fmt, text: str, *, split: str = "canonical") -> list[int]:
    """Ids of model output `text`: control-token strings as their ids, the rest encoded by tekken, or
    (`split="bytes"`) one byte token per byte, which splits every name, argument and character."""
    tekken = fmt.tokenizer.instruct_tokenizer.tokenizer
    ids: list[int] = []
    for i, piece in enumerate(_MARKUP.split(text)):
        if i % 2:
            ids.append(IDS[piece])
        elif split == "bytes":
            ids += [tekken.num_special_tokens + byte for byte in piece.encode()]
        elif piece:
            ids += tekken.encode(piece, bos=False, eos=False)
    return ids


def parse(fmt, text: str, sizes=None, tools=TOOLS, split="canonical"):
    ids = ids_of(fmt, text, split=split)
    return items(feed(fmt.parser(tools), ids, sizes if sizes != "ones" else [1] * len(ids)))


@pytest.fixture(scope="module")
def v11():
    return load_mistral_format(tekken_file("v11"))


@pytest.fixture(scope="module")
def v7():
    return load_mistral_format(tekken_file("v7"))


def test_byte_tokens_are_the_first_ranks(mistral_format):
    assert [mistral_format.token_bytes(1000 + b) for b in (0, 65, 255)] == [b"\x00", b"A", b"\xff"]
    assert mistral_format.token_bytes(IDS["[TOOL_CALLS]"]) == b"[TOOL_CALLS]"


def test_single_call_streams_its_arguments_as_written(mistral_format):
    ids = ids_of(mistral_format, '[TOOL_CALLS]read_file[ARGS]{"path": "src/a.py"}</s>')
    events = feed(mistral_format.parser(TOOLS), ids, [1] * len(ids))
    tekken = mistral_format.tokenizer.instruct_tokenizer.tokenizer
    assert events == [
        ItemStarted(0, "tool_call", name="read_file"),
        *[ItemDelta(0, tekken.decode([t])) for t in tekken.encode('{"path": "src/a.py"}', bos=False, eos=False)],
        ItemDone(0, '{"path": "src/a.py"}'),
    ]


AGENT_TURN = ("[THINK]The tests first; 東京 🗼.[/THINK]Running them.\n"
              '[TOOL_CALLS]shell[ARGS]{"command": ["pytest", "-q"], "timeout_ms": 60000}'
              '[TOOL_CALLS]read_file[ARGS]{"path": "pyproject.toml"}</s>')
AGENT_ITEMS = [("reasoning", None, "The tests first; 東京 🗼."), ("text", None, "Running them.\n"),
               ("tool_call", "shell", '{"command": ["pytest", "-q"], "timeout_ms": 60000}'),
               ("tool_call", "read_file", '{"path": "pyproject.toml"}')]


@pytest.mark.parametrize("split", ["canonical", "bytes"])
@pytest.mark.parametrize("sizes", [None, "ones", [3, 5, 7]])
def test_reasoning_text_and_parallel_calls_however_split(mistral_format, split, sizes):
    assert parse(mistral_format, AGENT_TURN, sizes, split=split) == AGENT_ITEMS


def test_typed_arguments_stay_the_json_the_model_wrote(mistral_format):
    written = '{"command":["ls","-la"],"timeout_ms":5,"extra":{"a":[1,2.5,null,true]}}'
    assert parse(mistral_format, f"[TOOL_CALLS]shell[ARGS]{written}</s>") == [("tool_call", "shell", written)]


def test_reasoning_tokens_are_counted(mistral_format):
    ids = ids_of(mistral_format, "[THINK]abc def[/THINK]ok</s>")
    parser = mistral_format.parser(TOOLS)
    parser.feed(ids)
    parser.finish()
    assert parser.reasoning_tokens == len(ids_of(mistral_format, "[THINK]abc def[/THINK]")) - 1


def test_v11_keeps_the_call_id_the_model_wrote(v11):
    ids = ids_of(v11, '[TOOL_CALLS]shell[CALL_ID]a1B2c3D4e[ARGS]{"command": ["ls"]}</s>')
    events = feed(v11.parser(TOOLS), ids)
    assert events[0] == ItemStarted(0, "tool_call", name="shell", call_id="a1B2c3D4e")
    assert items(events) == [("tool_call", "shell", '{"command": ["ls"]}')]
    odd = feed(v11.parser(TOOLS), ids_of(v11, "[TOOL_CALLS]shell[CALL_ID]x[ARGS]{}</s>"))
    assert odd[0] == ItemStarted(0, "tool_call", name="shell", call_id=None)  # not Mistral's shape: the gateway's


def test_v7_reads_the_json_list(v7):
    text = ('[TOOL_CALLS] [{"name": "shell", "arguments": {"command": ["ls"]}, "id": "a1B2c3D4e"}, '
            '{"name": "read_file", "arguments": {"path": "東京.md"}}]</s>')
    events = feed(v7.parser(TOOLS), ids_of(v7, text, split="bytes"))
    assert items(events) == [("tool_call", "shell", '{"command": ["ls"]}'),
                             ("tool_call", "read_file", '{"path": "東京.md"}')]
    assert events[0] == ItemStarted(0, "tool_call", name="shell", call_id="a1B2c3D4e")


@pytest.mark.parametrize("text, expected", [
    ("[TOOL_CALLS]rm_rf[ARGS]{}</s>", [("text", None, "[TOOL_CALLS]rm_rf[ARGS]{}")]),  # not a tool of the request
    ("[TOOL_CALLS]shell</s>", [("text", None, "[TOOL_CALLS]shell")]),  # no [ARGS]
    ("[TOOL_CALLS]sh ell[ARGS]{}</s>", [("text", None, "[TOOL_CALLS]sh ell[ARGS]{}")]),
    ("[TOOL_CALLS]shell[THINK][ARGS]{}</s>", [("text", None, "[TOOL_CALLS]shell[THINK][ARGS]{}")]),
    ('[TOOL_CALLS]shell[ARGS]{"command": ["ls"', [("tool_call", "shell", '{"command": ["ls"')]),  # cut short
    ("Done.[ARGS][/THINK]</s>", [("text", None, "Done.[ARGS][/THINK]")]),  # markers out of place are text
    ("[THINK]never closed", [("reasoning", None, "never closed")]),
    # the marker's id inside an argument starts the next call (as in vLLM), which never gets its [ARGS]
    ('[TOOL_CALLS]read_file[ARGS]{"path": "[TOOL_CALLS]"}',
     [("tool_call", "read_file", '{"path": "'), ("text", None, '[TOOL_CALLS]"}')]),
])
def test_malformed_markup_degrades_to_text(mistral_format, text, expected):
    assert parse(mistral_format, text) == expected
    assert parse(mistral_format, text, "ones", split="bytes") == expected


def test_v7_malformed_list_is_text(v7):
    assert parse(v7, '[TOOL_CALLS] [{"name": "shell", "arguments": </s>') == [
        ("text", None, '[TOOL_CALLS] [{"name": "shell", "arguments": ')]
    assert parse(v7, '[TOOL_CALLS] [{"name": "nope", "arguments": {}}]</s>') == [
        ("text", None, '[TOOL_CALLS] [{"name": "nope", "arguments": {}}]')]


@settings(derandomize=True, max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_ids_parse_without_error(mistral_format, data):
    """Random mixes of control tokens and text, fed in random pieces: events keep their contract."""
    pool = [*IDS.values(), *range(1000, 1300), 5000, 70000, 131071, 131072, -1]
    ids = data.draw(st.lists(st.sampled_from(pool), max_size=60))
    sizes = data.draw(st.lists(st.integers(1, 8), max_size=10))
    items(feed(mistral_format.parser(data.draw(st.sampled_from([[], TOOLS]))), ids, sizes))
