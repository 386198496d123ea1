"""GLM-4.5/4.6/4.7 tool calls: GLM's token ids in, reasoning / text / tool-call items out,
arguments typed by the tool's schema as vLLM's `glm45`/`glm47` parsers type them."""

from __future__ import annotations

import json

import pytest

from gateway.core.conversation import Tool
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted
from gateway.formats.glm import convert_arg_value
from tests.support.family_contract import OutputContract
from tests.support.glm import KNOWN_IDS
from tests.support.parse_events import feed, items, marked_ids

ENDOFTEXT, USER, OBSERVATION = KNOWN_IDS["<|endoftext|>"], KNOWN_IDS["<|user|>"], KNOWN_IDS["<|observation|>"]
MARKUP = {token: KNOWN_IDS[token] for token in (
    "<tool_call>", "</tool_call>", "<think>", "</think>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
    "<|user|>", "<|observation|>", "<|endoftext|>", "<|assistant|>", "<|system|>")}

SHELL = Tool("shell", "Run a command.", {
    "type": "object",
    "properties": {
        "command": {"type": "array", "items": {"type": "string"}},
        "workdir": {"type": "string"},
        "timeout_ms": {"type": "integer"},
        "ratio": {"type": "number"},
        "login": {"type": "boolean"},
        "env": {"type": "object"},
        "note": {"type": ["string", "null"]},
        "mode": {"enum": ["fast", "slow"]},
    },
})
READ = Tool("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})
TOOLS = [SHELL, READ]


def ids_of(tokenizer, text: str, *, split: str = "canonical") -> list[int]:
    """Ids of model output `text`: markup as GLM's added tokens, the rest canonically encoded,
    or (`split="bytes"`) one byte-level token per byte, which splits every multi-byte character."""
    return marked_ids(tokenizer, text, MARKUP, split=split)


def parse_events(fmt, ids: list[int], sizes=None, tools=TOOLS) -> list:
    return feed(fmt.parser(tools), ids, sizes)


def parse(fmt, ids: list[int], sizes=None, tools=TOOLS) -> list[tuple[str, str | None, str]]:
    return items(parse_events(fmt, ids, sizes, tools))


def call(name: str, *params: tuple[str, str], newlines: bool = True) -> str:
    """A call as GLM-4.5/4.6 writes it (`newlines`) or as GLM-4.7 and GLM-5 do."""
    n = "\n" if newlines else ""
    body = "".join(f"{n}<arg_key>{key}</arg_key>{n}<arg_value>{value}</arg_value>" for key, value in params)
    return f"<tool_call>{name}{body}{n}</tool_call>"


# What GLM-4.6 writes after its generation prompt (`<|assistant|>`), ending on the token that opens
# the tool results.
AGENT_TURN = (
    "\n<think>The user wants the tests run in 東京's repo 🗼.</think>\nRunning them.\n"
    + call("shell", ("command", '["pytest", "-q"]'), ("workdir", "/srv/app"), ("timeout_ms", "60000")) + "\n"
    + call("read_file", ("path", "pyproject.toml")) + "<|observation|>"
)
AGENT_ITEMS = [
    ("reasoning", None, "The user wants the tests run in 東京's repo 🗼."),
    ("text", None, "Running them."),
    ("tool_call", "shell", '{"command": ["pytest", "-q"], "workdir": "/srv/app", "timeout_ms": 60000}'),
    ("tool_call", "read_file", '{"path": "pyproject.toml"}'),
]


def test_the_format_reads_glm_calls_off_the_template(glm_format):
    assert glm_format.tool_calls == "glm"
    assert glm_format.stop_token_ids == [ENDOFTEXT, USER, OBSERVATION]
    assert glm_format.turn_terminators == frozenset(KNOWN_IDS[t] for t in (
        "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"))


def test_single_call_events(glm_format, glm_tokenizer):
    ids = ids_of(glm_tokenizer, "\n<think>Read it.</think>\n" + call("read_file", ("path", "src/a.py")) + "<|observation|>")
    assert parse_events(glm_format, ids, [1] * len(ids)) == [
        ItemStarted(0, "reasoning"), ItemDelta(0, "Read"), ItemDelta(0, " it"), ItemDelta(0, "."),
        ItemDone(0, "Read it."),
        ItemStarted(1, "tool_call", name="read_file"),
        ItemDelta(1, "{"), ItemDelta(1, '"path": "'), ItemDelta(1, "src"), ItemDelta(1, "/a"), ItemDelta(1, ".py"),
        ItemDelta(1, '"'), ItemDelta(1, "}"), ItemDone(1, '{"path": "src/a.py"}'),
    ]


@pytest.mark.parametrize("newlines", [True, False], ids=["glm-4.6", "glm-4.7"])
def test_reasoning_text_and_parallel_calls(glm_format, glm_tokenizer, newlines):
    turn = AGENT_TURN if newlines else AGENT_TURN.replace("\n<arg", "<arg").replace("\n</tool_call>", "</tool_call>")
    assert ("<tool_call>shell<arg_key>" in turn) is not newlines
    assert parse(glm_format, ids_of(glm_tokenizer, turn)) == AGENT_ITEMS


def test_calls_without_reasoning_or_text_and_without_arguments(glm_format, glm_tokenizer):
    turn = "\n<think></think>\n" + call("read_file") + call("read_file", ("path", "b")) + "<|observation|>"
    assert parse(glm_format, ids_of(glm_tokenizer, turn)) == [
        ("tool_call", "read_file", "{}"), ("tool_call", "read_file", '{"path": "b"}')]


TYPED = [
    # (parameter, value as written, JSON of the converted value) — vLLM 0.32's coerce_to_schema_type
    ("workdir", "12345", '"12345"'),  # a string that looks like a number stays a string
    ("workdir", "  spaced\n\n", '"  spaced\\n\\n"'),  # values are exact: no newline is the markup's
    ("timeout_ms", "007", "7"),
    ("timeout_ms", "1.5", "1.5"),  # not an integer: any JSON, as vLLM falls back to
    ("timeout_ms", "soon", '"soon"'),
    ("ratio", "0.25", "0.25"),
    ("ratio", "3.0", "3"),
    ("ratio", "inf", '"inf"'),
    ("login", "True", "true"),
    ("login", "0", "false"),
    ("login", "yes", '"yes"'),
    ("command", '["git", "commit", "-m", "fix: a \\"quoted\\" msg"]', '["git", "commit", "-m", "fix: a \\"quoted\\" msg"]'),
    ("command", "ls -la", '"ls -la"'),
    ("env", '{"A": {"B": [1, 2.5, null, true]}}', '{"A": {"B": [1, 2.5, null, true]}}'),
    ("note", "null", "null"),  # ["string", "null"]: null first
    ("note", "None", '"None"'),
    ("mode", "fast", '"fast"'),  # an enum of strings is a string
    ("undeclared", "42", '"42"'),  # not in the schema: the text
]


@pytest.mark.parametrize(("name", "written", "expected"), TYPED)
def test_arguments_are_typed_by_the_schema(glm_format, glm_tokenizer, name, written, expected):
    turn = "\n<think></think>\n" + call("shell", (name, written)) + "<|observation|>"
    [(_, _, arguments)] = parse(glm_format, ids_of(glm_tokenizer, turn))
    assert arguments == "{" + json.dumps(name) + ": " + expected + "}"


def test_conversion_edge_values():
    assert convert_arg_value("true", {"type": "integer"}) is True  # vLLM's last resort: any JSON
    assert convert_arg_value("[1e999]", {"type": "array"}) == "[1e999]"  # no JSON for infinity
    assert convert_arg_value("5", {"type": ["integer", "string"]}) == 5
    assert convert_arg_value("5", {"anyOf": [{"type": "string"}, {"type": "number"}]}) == 5
    assert convert_arg_value("x", None) == "x"


def test_without_tools_every_value_is_text_and_any_name_a_call(glm_format, glm_tokenizer):
    turn = "\n<think></think>\n" + call("anything", ("timeout_ms", "5"), ("login", "true")) + "<|observation|>"
    assert parse(glm_format, ids_of(glm_tokenizer, turn), tools=()) == [
        ("tool_call", "anything", '{"timeout_ms": "5", "login": "true"}')]


def test_a_string_value_streams_as_it_is_written(glm_format, glm_tokenizer):
    value = "def main():\n    print('<b>hi</b>')\n    return 0\n"
    ids = ids_of(glm_tokenizer, "\n<think></think>\n" + call("read_file", ("path", value)) + "<|observation|>")
    deltas = [e.text for e in parse_events(glm_format, ids, [1] * len(ids)) if isinstance(e, ItemDelta)]
    assert deltas[:2] == ["{", '"path": "'] and deltas[-2:] == ['"', "}"]
    assert len(deltas) > 10
    assert json.loads("".join(deltas)) == {"path": value}


def test_tags_spelled_in_text_pieces_are_value(glm_format, glm_tokenizer):
    """Only GLM's single-id tags are structure; the same text in pieces (how content is rendered
    back) is part of the value."""
    value = "a</arg_value><arg_key>x</arg_key><tool_call>"
    pieces = glm_tokenizer._encode_without_added_tokens(value)
    ids = [*ids_of(glm_tokenizer, "<tool_call>shell<arg_key>workdir</arg_key><arg_value>"), *pieces,
           *ids_of(glm_tokenizer, "</arg_value></tool_call><|observation|>")]
    assert parse(glm_format, ids) == [("tool_call", "shell", json.dumps({"workdir": value}))]


MALFORMED = [
    # (output after the empty think block, items)
    (call("no_such_tool", ("x", "1")),  # vLLM validates names against the request's tools
     [("text", None, "<tool_call>no_such_tool\n<arg_key>x</arg_key>\n<arg_value>1</arg_value>\n</tool_call>")]),
    ("<tool_call>{{ tc.name }}</tool_call>", [("text", None, "<tool_call>{{ tc.name }}</tool_call>")]),
    ("<tool_call></tool_call>", [("text", None, "<tool_call></tool_call>")]),
    ("<tool_call>shell<arg_value>1</arg_value></tool_call>",  # a tag before any key: not a call
     [("text", None, "<tool_call>shell<arg_value>1</arg_value></tool_call>")]),
    ("<tool_call>shell<arg_key>a</arg_key><arg_value>1</arg_value><arg_value>2</arg_value></tool_call>",
     [("tool_call", "shell", '{"a": "1"}')]),  # a value without a key is skipped
    ("<tool_call>shell<arg_key>workdir</arg_key>junk<arg_value>/tmp</arg_value>junk</tool_call>",
     [("tool_call", "shell", '{"workdir": "/tmp"}')]),  # text between tags is skipped
    (("<tool_call>shell<arg_key>workdir</arg_key><arg_value>/tmp<arg_key>timeout_ms</arg_key><arg_value>5"
     "</arg_value></tool_call>"), [("tool_call", "shell", '{"workdir": "/tmp", "timeout_ms": 5}')]),  # unclosed
    (("<tool_call>shell<arg_key>workdir</arg_key><arg_value>a</arg_value><arg_key>workdir</arg_key>"
     "<arg_value>b</arg_value></tool_call>"), [("tool_call", "shell", '{"workdir": "a"}')]),  # the first kept
    ("<tool_call>shell<arg_key>timeout_ms</arg_key><arg_value>12", [("tool_call", "shell", '{"timeout_ms": 12}')]),
    ("<tool_call>shell<arg_key>work", [("tool_call", "shell", "{}")]),  # cut mid-key
    ("<tool_call>shell", [("text", None, "<tool_call>shell")]),  # cut before any argument
    ("</tool_call> stray <arg_key>", [("text", None, "</tool_call> stray <arg_key>")]),
    ("done</think>", [("text", None, "done</think>")]),
]


FRAGMENTS = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<arg_key>", "</arg_key>", "<arg_value>",
             "</arg_value>", "<|observation|>", "<|user|>", "shell", "read_file", "workdir", "login", "env", "\n",
             " ", "<", "true", '{"a": 1}', "é", "東京", "x", "null"]


# The contract every family's parser keeps (tests/formats/test_family_contract.py checks it).
CONTRACT = OutputContract(
    "glm",
    format="glm_format",
    tokenizer="glm_tokenizer",
    markup=MARKUP,
    tools=TOOLS,
    agent_turn=AGENT_TURN,
    agent_items=AGENT_ITEMS,
    split_turn=("\n<think></think>\n" + call("shell", ("command", '["a"]'), ("workdir", "é/東京 x")) + "<|observation|>"),
    split_items=[("tool_call", "shell", '{"command": ["a"], "workdir": "é/東京 x"}')],
    malformed=MALFORMED,
    fragments=FRAGMENTS,
    prefix="\n<think></think>\n",
    cut_call=("\n<think></think>\n<tool_call>shell\n<arg_key>workdir</arg_key>\n<arg_value>/srv", "shell",
              '{"workdir": "/srv', '{"workdir": "/srv"}'),
    json_arguments=True,
)
