"""Qwen3.5/3.6 XML tool calls: real Qwen3.6 token ids in, reasoning / text / tool-call items out,
arguments typed by the tool's schema as vLLM's `qwen3_coder` parser types them."""

from __future__ import annotations

import json

from gateway.formats._xml_calls import convert_param_value
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted
from tests.support.family_contract import AGENT_CALLS, READ, Case, OutputContract, typed_shell

IM_END, ENDOFTEXT = 248046, 248044
CALL, CALL_END, THINK, THINK_END = 248058, 248059, 248068, 248069
MARKUP = {"<tool_call>": CALL, "</tool_call>": CALL_END, "<think>": THINK, "</think>": THINK_END,
          "<|im_end|>": IM_END, "<|endoftext|>": ENDOFTEXT}

SHELL = typed_shell(note={"anyOf": [{"type": "string"}, {"type": "null"}]}, nothing={"type": "null"})
TOOLS = [SHELL, READ]

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
AGENT_ITEMS = [("reasoning", None, "The user wants the tests run in 東京's repo 🗼."), ("text", None, "Running them."),
               *AGENT_CALLS]


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


def test_conversion_matches_vllm_on_edge_values():
    properties = SHELL.parameters["properties"]
    assert convert_param_value("inf", "ratio", properties) == "inf"
    assert convert_param_value("nan", "ratio", properties) == "nan"
    assert convert_param_value("{1, 2}", "env", properties) == "{1, 2}"  # a Python set is no JSON value
    assert convert_param_value('"{\'k\': \'v\'}"', "env", properties) == {"k": "v"}  # double-encoded repr
    assert convert_param_value("-12", "timeout_ms", properties) == -12
    assert convert_param_value("x", "path", {}) == "x"


MARKUP_IN_VALUES = [
    # literal markup inside values stays value
    ("a </parameter> b", "a </parameter> b"),
    ("x\n</parameter>\nnot markup", "x\n</parameter>\nnot markup"),
    ("<parameter=inner>\nnested\n</parameter>\nafter", "<parameter=inner>\nnested\n</parameter>\nafter"),
    ("if a < b and c </function> d", "if a < b and c </function> d"),
    ("<function=f>\n</function>", "<function=f>\n</function>"),
]


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


def _turn(*calls: str) -> str:
    return "</think>\n\n" + "\n".join(calls) + "<|im_end|>"


CASES = [
    Case("I'll read it.\n</think>\n\n" + call("read_file", ("path", "src/a.py")) + "<|im_end|>",
         [("reasoning", None, "I'll read it."), ("tool_call", "read_file", '{"path": "src/a.py"}')], events=[
             ItemStarted(0, "reasoning"), ItemDelta(0, "I"), ItemDelta(0, "'ll"), ItemDelta(0, " read"),
             ItemDelta(0, " it"), ItemDelta(0, "."), ItemDone(0, "I'll read it."),
             ItemStarted(1, "tool_call", name="read_file"),
             ItemDelta(1, "{"), ItemDelta(1, '"path": "'), ItemDelta(1, "src"), ItemDelta(1, "/a"), ItemDelta(1, ".py"),
             ItemDelta(1, '"'), ItemDelta(1, "}"), ItemDone(1, '{"path": "src/a.py"}')], about="single-call-events"),
    Case("\n" + _turn(call("read_file", ("path", "a")), call("read_file", ("path", "b"))),
         [("tool_call", "read_file", '{"path": "a"}'), ("tool_call", "read_file", '{"path": "b"}')],
         about="no-reasoning-or-text"),
    Case("</think>\n\n<tool_call>\n<function=read_file>\n</function>\n</tool_call><|im_end|>",
         [("tool_call", "read_file", "{}")], about="no-parameters"),
    *(Case(_turn(call("shell", (name, written))), [("tool_call", "shell", "{" + json.dumps(name) + ": " + expected + "}")],
           about=f"typed-{name}-{written!r}") for name, written, expected in TYPED),
    # Without tools every value is text.
    Case(_turn(call("shell", ("timeout_ms", "5"), ("login", "true"))),
         [("tool_call", "shell", '{"timeout_ms": "5", "login": "true"}')], tools=(), about="without-tools"),
    *(Case(_turn(call("shell", ("workdir", written), ("login", "true"))),
           [("tool_call", "shell", json.dumps({"workdir": value, "login": True}, ensure_ascii=False))],
           about=f"markup-in-value-{n}") for n, (written, value) in enumerate(MARKUP_IN_VALUES)),
]
STREAMED_VALUE = "def main():\n    print('<b>hi</b>')\n    return 0\n"

# The contract every family's parser keeps (tests/formats/test_family_contract.py checks it).
CONTRACT = OutputContract(
    "xml", format="qwen36_format", tokenizer="qwen36_tokenizer", markup=MARKUP, tools=TOOLS,
    agent_turn=AGENT_TURN, agent_items=AGENT_ITEMS, malformed=MALFORMED, fragments=FRAGMENTS,
    split_turn=("</think>\n\n" + call("shell", ("command", '["a"]'), ("workdir", "é/</parameter>x")) + "<|im_end|>"),
    split_items=[("tool_call", "shell", '{"command": ["a"], "workdir": "é/</parameter>x"}')],
    prefix="</think>\n\n",
    cut_call=("</think>\n\n<tool_call>\n<function=shell>\n<parameter=workdir>\n/srv", "shell", '{"workdir": "/srv',
              '{"workdir": "/srv"}'),
    json_arguments=True,
    stops=[IM_END, ENDOFTEXT],  # either closes the turn
    cases=CASES,
    streamed=(_turn(call("read_file", ("path", STREAMED_VALUE))), STREAMED_VALUE),
)
