"""Qwen3.5/3.6 XML tool calls: real Qwen3.6 token ids in, reasoning / text / tool-call items out,
arguments typed by the tool's schema as vLLM's `qwen3_coder` parser types them."""

from __future__ import annotations

import json

import pytest

from gateway.core.conversation import Tool
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted
from gateway.formats.qwen_xml import convert_param_value
from tests.support.family_contract import OutputContract
from tests.support.parse_events import feed, items, marked_ids

IM_END, ENDOFTEXT = 248046, 248044
CALL, CALL_END, THINK, THINK_END = 248058, 248059, 248068, 248069
MARKUP = {"<tool_call>": CALL, "</tool_call>": CALL_END, "<think>": THINK, "</think>": THINK_END,
          "<|im_end|>": IM_END, "<|endoftext|>": ENDOFTEXT}

SHELL = Tool("shell", "Run a command.", {
    "type": "object",
    "properties": {
        "command": {"type": "array", "items": {"type": "string"}},
        "workdir": {"type": "string"},
        "timeout_ms": {"type": "integer"},
        "ratio": {"type": "number"},
        "login": {"type": "boolean"},
        "env": {"type": "object"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "nothing": {"type": "null"},
    },
})
READ = Tool("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})
TOOLS = [SHELL, READ]

def ids_of(tokenizer, text: str, *, split: str = "canonical") -> list[int]:
    """Ids of model output `text`: markup as its added tokens, the rest canonically encoded, or
    (`split="bytes"`) one byte-level token per byte: a tokenization no encoder makes, which
    splits every tag and every multi-byte character across tokens."""
    return marked_ids(tokenizer, text, MARKUP, split=split)


def parse_events(fmt, ids: list[int], sizes=None, tools=TOOLS) -> list:
    return feed(fmt.parser(tools), ids, sizes)


def parse(fmt, ids: list[int], sizes=None, tools=TOOLS) -> list[tuple[str, str | None, str]]:
    return items(parse_events(fmt, ids, sizes, tools))


def call(name: str, *params: tuple[str, str]) -> str:
    body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


# What Qwen3.6 writes after its generation prompt (`<|im_start|>assistant\n<think>\n`).
AGENT_TURN = (
    "The user wants the tests run in 東京's repo 🗼.\n</think>\n\n"
    "Running them.\n\n"
    + call("shell", ("command", '["pytest", "-q"]'), ("workdir", "/srv/app"), ("timeout_ms", "60000")) + "\n"
    + call("read_file", ("path", "pyproject.toml"))
    + "<|im_end|>"
)
AGENT_ITEMS = [
    ("reasoning", None, "The user wants the tests run in 東京's repo 🗼."),
    ("text", None, "Running them."),
    ("tool_call", "shell", '{"command": ["pytest", "-q"], "workdir": "/srv/app", "timeout_ms": 60000}'),
    ("tool_call", "read_file", '{"path": "pyproject.toml"}'),
]


def test_the_format_reads_xml_calls_off_the_template(qwen36_format):
    assert qwen36_format.tool_calls == "xml"
    assert qwen36_format.stop_token_ids == [IM_END, ENDOFTEXT]
    assert qwen36_format.turn_terminators == frozenset({IM_END, ENDOFTEXT})  # either closes the turn


def test_single_call_events(qwen36_format, qwen36_tokenizer):
    ids = ids_of(qwen36_tokenizer, "I'll read it.\n</think>\n\n" + call("read_file", ("path", "src/a.py")) + "<|im_end|>")
    assert parse_events(qwen36_format, ids, [1] * len(ids)) == [
        ItemStarted(0, "reasoning"), ItemDelta(0, "I"), ItemDelta(0, "'ll"), ItemDelta(0, " read"),
        ItemDelta(0, " it"), ItemDelta(0, "."), ItemDone(0, "I'll read it."),
        ItemStarted(1, "tool_call", name="read_file"),
        ItemDelta(1, "{"), ItemDelta(1, '"path": "'), ItemDelta(1, "src"), ItemDelta(1, "/a"), ItemDelta(1, ".py"),
        ItemDelta(1, '"'), ItemDelta(1, "}"), ItemDone(1, '{"path": "src/a.py"}'),
    ]


def test_reasoning_text_and_parallel_calls(qwen36_format, qwen36_tokenizer):
    assert parse(qwen36_format, ids_of(qwen36_tokenizer, AGENT_TURN)) == AGENT_ITEMS


def test_calls_without_reasoning_or_text(qwen36_format, qwen36_tokenizer):
    turn = "\n</think>\n\n" + call("read_file", ("path", "a")) + "\n" + call("read_file", ("path", "b")) + "<|im_end|>"
    assert parse(qwen36_format, ids_of(qwen36_tokenizer, turn)) == [
        ("tool_call", "read_file", '{"path": "a"}'), ("tool_call", "read_file", '{"path": "b"}')]


def test_a_call_with_no_parameters(qwen36_format, qwen36_tokenizer):
    turn = "</think>\n\n<tool_call>\n<function=read_file>\n</function>\n</tool_call><|im_end|>"
    assert parse(qwen36_format, ids_of(qwen36_tokenizer, turn)) == [("tool_call", "read_file", "{}")]


TYPED = [
    # (parameter, value as written, JSON of the converted value) — vLLM's _convert_param_value
    ("workdir", "12345", '"12345"'),  # a string that looks like a number stays a string
    ("workdir", "null", '"null"'),
    ("workdir", "  spaced\n\n", '"  spaced\\n\\n"'),  # the newline before </parameter> is the markup's
    ("timeout_ms", "007", "7"),
    ("timeout_ms", "1.5", '"1.5"'),  # not an integer: the text
    ("ratio", "0.25", "0.25"),
    ("ratio", "3.0", "3"),
    ("ratio", "1e3", "1000"),
    ("ratio", "fast", '"fast"'),
    ("login", "True", "true"),  # Qwen3.5's template wrote Python booleans
    ("login", "false", "false"),
    ("login", "yes", "false"),
    ("command", '["git", "commit", "-m", "fix: a \\"quoted\\" msg"]', '["git", "commit", "-m", "fix: a \\"quoted\\" msg"]'),
    ("command", "['ls', '-la']", '["ls", "-la"]'),  # a Python literal is accepted too
    ("command", "ls -la", '"ls -la"'),
    ("env", '{"A": {"B": [1, 2.5, null, true]}, "C": "x"}', '{"A": {"B": [1, 2.5, null, true]}, "C": "x"}'),
    ("env", "None", "null"),
    ("note", "None", "null"),  # nullable string
    ("note", "none of it", '"none of it"'),
    ("nothing", "null", "null"),
    ("undeclared", "42", '"42"'),  # not in the schema: the text
]


@pytest.mark.parametrize(("name", "written", "expected"), TYPED)
def test_parameters_are_typed_by_the_schema(qwen36_format, qwen36_tokenizer, name, written, expected):
    turn = "</think>\n\n" + call("shell", (name, written)) + "<|im_end|>"
    [(_, _, arguments)] = parse(qwen36_format, ids_of(qwen36_tokenizer, turn))
    assert arguments == "{" + json.dumps(name) + ": " + expected + "}"


def test_conversion_matches_vllm_on_edge_values():
    properties = SHELL.parameters["properties"]
    assert convert_param_value("inf", "ratio", properties) == "inf"
    assert convert_param_value("nan", "ratio", properties) == "nan"
    assert convert_param_value("{1, 2}", "env", properties) == "{1, 2}"  # a Python set is no JSON value
    assert convert_param_value('"{\'k\': \'v\'}"', "env", properties) == {"k": "v"}  # double-encoded repr
    assert convert_param_value("-12", "timeout_ms", properties) == -12
    assert convert_param_value("x", "path", {}) == "x"


def test_without_tools_every_value_is_text(qwen36_format, qwen36_tokenizer):
    turn = "</think>\n\n" + call("shell", ("timeout_ms", "5"), ("login", "true")) + "<|im_end|>"
    assert parse(qwen36_format, ids_of(qwen36_tokenizer, turn), tools=()) == [
        ("tool_call", "shell", '{"timeout_ms": "5", "login": "true"}')]


def test_a_string_value_streams_as_it_is_written(qwen36_format, qwen36_tokenizer):
    value = "def main():\n    print('<b>hi</b>')\n    return 0\n"
    turn = "</think>\n\n" + call("read_file", ("path", value)) + "<|im_end|>"
    ids = ids_of(qwen36_tokenizer, turn)
    deltas = [e.text for e in parse_events(qwen36_format, ids, [1] * len(ids)) if isinstance(e, ItemDelta)]
    assert deltas[:2] == ["{", '"path": "'] and deltas[-2:] == ['"', "}"]
    assert len(deltas) > 10  # the value came in pieces, as the tokens did
    assert json.loads("".join(deltas)) == {"path": value}


MARKUP_IN_VALUES = [
    # literal markup inside values stays value
    ("a </parameter> b", "a </parameter> b"),
    ("x\n</parameter>\nnot markup", "x\n</parameter>\nnot markup"),
    ("<parameter=inner>\nnested\n</parameter>\nafter", "<parameter=inner>\nnested\n</parameter>\nafter"),
    ("if a < b and c </function> d", "if a < b and c </function> d"),
    ("<function=f>\n</function>", "<function=f>\n</function>"),
]


@pytest.mark.parametrize(("written", "value"), MARKUP_IN_VALUES)
def test_markup_inside_a_value_is_value(qwen36_format, qwen36_tokenizer, written, value):
    turn = "</think>\n\n" + call("shell", ("workdir", written), ("login", "true")) + "<|im_end|>"
    assert parse(qwen36_format, ids_of(qwen36_tokenizer, turn)) == [
        ("tool_call", "shell", json.dumps({"workdir": value, "login": True}, ensure_ascii=False))]


MALFORMED = [
    # (output after </think>, items)
    ("<tool_call>\n<function=no_such_tool>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>",
     [("tool_call", "no_such_tool", '{"x": "1"}')]),  # as vLLM: a well-formed name is a call
    ("<tool_call>\n<function={{ tc.name }}>\n</function>\n</tool_call>",
     [("text", None, "<tool_call>\n<function={{ tc.name }}>\n</function>\n</tool_call>")]),
    ("<tool_call>\nnot a call\n</tool_call>", [("text", None, "<tool_call>\nnot a call\n</tool_call>")]),
    ('<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n</tool_call>',
     [("tool_call", "read_file", '{"path": "a"}')]),  # a hermes JSON call
    ("<tool_call>\n<function=read_file>\n</parameter>\n<parameter=path>\na\n</parameter>\n</function>\n</tool_call>",
     [("tool_call", "read_file", '{"path": "a"}')]),  # a stray </parameter> between parameters
    (("<tool_call>\n<function=shell>\n<parameter=workdir>\n/tmp\n<parameter=timeout_ms>\n5\n</parameter>\n"
     "</function>\n</tool_call>"),
     [("tool_call", "shell", '{"workdir": "/tmp", "timeout_ms": 5}')]),  # an unclosed value
    ("<tool_call>\n<function=shell>\n<parameter=workdir>\n/tmp\n</function>\n</tool_call>",
     [("tool_call", "shell", '{"workdir": "/tmp"}')]),  # an unclosed value at </function>
    (("<tool_call>\n<function=shell>\n<parameter=workdir>\na\n</parameter>\n<parameter=workdir>\nb\n</parameter>\n"
     "</function>\n</tool_call>"), [("tool_call", "shell", '{"workdir": "a"}')]),  # the first one kept
    ("<tool_call>\n<function=shell>\n<parameter=timeout_ms>\n5\n</parameter>\n</tool_call>",
     [("tool_call", "shell", '{"timeout_ms": 5}')]),  # no </function>
    ("<tool_call>\n<function=shell>\n<parameter=workdir>\n/tm", [("tool_call", "shell", '{"workdir": "/tm"}')]),
    ("<tool_call>\n<function=shell>\n<parameter=timeout_ms>\n12\n</param",
     [("tool_call", "shell", '{"timeout_ms": 12}')]),  # EOS mid-tag
    ("<tool_call>\n<function=sh", [("text", None, "<tool_call>\n<function=sh")]),
    ("<tool_call>", [("text", None, "<tool_call>")]),
    ("</tool_call> stray", [("text", None, "</tool_call> stray")]),
    ("<function=shell>\n</function>", [("text", None, "<function=shell>\n</function>")]),  # outside a block: text
    ("done</think>", [("text", None, "done</think>")]),
]


FRAGMENTS = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<|im_end|>", "<function=shell>", "<function=",
             "<parameter=workdir>", "<parameter=login>", "<parameter=env>", "<parameter=", "</parameter>",
             "</function>", "\n", " ", ">", "<", "true", "{\"a\": 1}", "é", "東京", "x", "null"]


# The contract every family's parser keeps (tests/formats/test_family_contract.py checks it).
CONTRACT = OutputContract(
    "xml",
    format="qwen36_format",
    tokenizer="qwen36_tokenizer",
    markup=MARKUP,
    tools=TOOLS,
    agent_turn=AGENT_TURN,
    agent_items=AGENT_ITEMS,
    split_turn=("</think>\n\n" + call("shell", ("command", '["a"]'), ("workdir", "é/</parameter>x")) + "<|im_end|>"),
    split_items=[("tool_call", "shell", '{"command": ["a"], "workdir": "é/</parameter>x"}')],
    malformed=MALFORMED,
    fragments=FRAGMENTS,
    prefix="</think>\n\n",
    cut_call=("</think>\n\n<tool_call>\n<function=shell>\n<parameter=workdir>\n/srv", "shell", '{"workdir": "/srv',
              '{"workdir": "/srv"}'),
    json_arguments=True,
)
