"""GLM-4.5/4.6/4.7 tool calls: GLM's token ids in, reasoning / text / tool-call items out,
arguments typed by the tool's schema as vLLM's `glm45`/`glm47` parsers type them."""

from __future__ import annotations

import json

from gateway.formats._schema_values import convert_arg_value
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted
from tests.support.family_contract import AGENT_CALLS, READ, Case, OutputContract, typed_shell
from tests.support.glm import KNOWN_IDS

ENDOFTEXT, USER, OBSERVATION = KNOWN_IDS["<|endoftext|>"], KNOWN_IDS["<|user|>"], KNOWN_IDS["<|observation|>"]
MARKUP = {token: KNOWN_IDS[token] for token in (
    "<tool_call>", "</tool_call>", "<think>", "</think>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
    "<|user|>", "<|observation|>", "<|endoftext|>", "<|assistant|>", "<|system|>")}

SHELL = typed_shell(note={"type": ["string", "null"]}, mode={"enum": ["fast", "slow"]})
TOOLS = [SHELL, READ]


def call(name: str, *params: tuple[str, str], newlines: bool = True) -> str:
    """A call as GLM-4.5/4.6 writes it (`newlines`) or as GLM-4.7 and GLM-5 do."""
    n = "\n" if newlines else ""
    body = "".join(f"{n}<arg_key>{key}</arg_key>{n}<arg_value>{value}</arg_value>" for key, value in params)
    return f"<tool_call>{name}{body}{n}</tool_call>"


def agent_turn(*, newlines: bool = True) -> str:
    """What GLM-4.6 (`newlines`) or GLM-4.7 writes after its generation prompt (`<|assistant|>`), ending on
    the token that opens the tool results."""
    return ("\n<think>The user wants the tests run in 東京's repo 🗼.</think>\nRunning them.\n"
            + call("shell", ("command", '["pytest", "-q"]'), ("workdir", "/srv/app"), ("timeout_ms", "60000"),
                   newlines=newlines) + "\n"
            + call("read_file", ("path", "pyproject.toml"), newlines=newlines) + "<|observation|>")


AGENT_TURN = agent_turn()
AGENT_ITEMS = [("reasoning", None, "The user wants the tests run in 東京's repo 🗼."), ("text", None, "Running them."),
               *AGENT_CALLS]


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


def test_conversion_edge_values():
    assert convert_arg_value("true", {"type": "integer"}) is True  # vLLM's last resort: any JSON
    assert convert_arg_value("[1e999]", {"type": "array"}) == "[1e999]"  # no JSON for infinity
    assert convert_arg_value("5", {"type": ["integer", "string"]}) == 5
    assert convert_arg_value("5", {"anyOf": [{"type": "string"}, {"type": "number"}]}) == 5
    assert convert_arg_value("x", None) == "x"


def test_tags_spelled_in_text_pieces_are_value(glm_format, glm_tokenizer):
    """Only GLM's single-id tags are structure; the same text in pieces (how content is rendered
    back) is part of the value."""
    value = "a</arg_value><arg_key>x</arg_key><tool_call>"
    pieces = glm_tokenizer._encode_without_added_tokens(value)
    ids = [*CONTRACT.ids(glm_tokenizer, "<tool_call>shell<arg_key>workdir</arg_key><arg_value>"), *pieces,
           *CONTRACT.ids(glm_tokenizer, "</arg_value></tool_call><|observation|>")]
    assert CONTRACT.parse(glm_format, ids) == [("tool_call", "shell", json.dumps({"workdir": value}))]


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


def _typed(name: str, written: str, expected: str) -> Case:
    return Case("\n<think></think>\n" + call("shell", (name, written)) + "<|observation|>",
                [("tool_call", "shell", "{" + json.dumps(name) + ": " + expected + "}")], about=f"typed-{name}-{written!r}")


CASES = [
    Case("\n<think>Read it.</think>\n" + call("read_file", ("path", "src/a.py")) + "<|observation|>",
         [("reasoning", None, "Read it."), ("tool_call", "read_file", '{"path": "src/a.py"}')], events=[
             ItemStarted(0, "reasoning"), ItemDelta(0, "Read"), ItemDelta(0, " it"), ItemDelta(0, "."),
             ItemDone(0, "Read it."),
             ItemStarted(1, "tool_call", name="read_file"),
             ItemDelta(1, "{"), ItemDelta(1, '"path": "'), ItemDelta(1, "src"), ItemDelta(1, "/a"), ItemDelta(1, ".py"),
             ItemDelta(1, '"'), ItemDelta(1, "}"), ItemDone(1, '{"path": "src/a.py"}')], about="single-call-events"),
    Case(agent_turn(newlines=False), AGENT_ITEMS, about="glm-4.7-calls"),  # no newlines between a call's tags
    Case("\n<think></think>\n" + call("read_file") + call("read_file", ("path", "b")) + "<|observation|>",
         [("tool_call", "read_file", "{}"), ("tool_call", "read_file", '{"path": "b"}')], about="no-reasoning-no-arguments"),
    *(_typed(*typed) for typed in TYPED),
    # Without tools every value is text and any name a call.
    Case("\n<think></think>\n" + call("anything", ("timeout_ms", "5"), ("login", "true")) + "<|observation|>",
         [("tool_call", "anything", '{"timeout_ms": "5", "login": "true"}')], tools=(), about="without-tools"),
]
STREAMED_VALUE = "def main():\n    print('<b>hi</b>')\n    return 0\n"

# The contract every family's parser keeps (tests/formats/test_family_contract.py checks it).
CONTRACT = OutputContract(
    "glm", format="glm_format", tokenizer="glm_tokenizer", markup=MARKUP, tools=TOOLS,
    agent_turn=AGENT_TURN, agent_items=AGENT_ITEMS, malformed=MALFORMED, fragments=FRAGMENTS,
    split_turn=("\n<think></think>\n" + call("shell", ("command", '["a"]'), ("workdir", "é/東京 x")) + "<|observation|>"),
    split_items=[("tool_call", "shell", '{"command": ["a"], "workdir": "é/東京 x"}')],
    prefix="\n<think></think>\n",
    cut_call=("\n<think></think>\n<tool_call>shell\n<arg_key>workdir</arg_key>\n<arg_value>/srv", "shell",
              '{"workdir": "/srv', '{"workdir": "/srv"}'),
    json_arguments=True,
    stops=[ENDOFTEXT, USER, OBSERVATION],
    terminators=[KNOWN_IDS[t] for t in ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")],
    cases=CASES,
    streamed=("\n<think></think>\n" + call("read_file", ("path", STREAMED_VALUE)) + "<|observation|>", STREAMED_VALUE),
)
