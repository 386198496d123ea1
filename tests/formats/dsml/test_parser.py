"""DeepSeek-V3.2/V4/V4.1 DSML tool calls: DeepSeek-V4's token ids in, reasoning / text / tool-call items out,
values read and typed as vLLM's `deepseek_v4` / `deepseek_v32` / `deepseek_v41` parsers read them, streamed per
parameter. V4.1's contract is V4's, spelled with V4.1's tags (`v41`)."""

from __future__ import annotations

import pytest

from gateway.core.conversation import Item, Tool
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted
from tests.support import family_render
from tests.support.deepseek_v4 import KNOWN_IDS
from tests.support.family_contract import READ, OutputContract
from tests.support.parse_events import feed, items, marked_ids

EOS = KNOWN_IDS["<｜end▁of▁sentence｜>"]
MARKUP = {token: KNOWN_IDS[token] for token in ("｜DSML｜", "<think>", "</think>", "<｜end▁of▁sentence｜>",
                                                "<｜User｜>", "<｜Assistant｜>")}

SHELL = Tool("shell", "Run a command.", {"type": "object", "properties": {
    "command": {"type": "array", "items": {"type": "string"}}, "workdir": {"type": "string"},
    "timeout_ms": {"type": "integer"}, "login": {"type": "boolean"}, "env": {"type": "object"}}})
TOOLS = [SHELL, READ]


def ids_of(tokenizer, text: str, *, split: str = "canonical") -> list[int]:
    """Ids of model output `text`: `｜DSML｜`, `<think>` … as V4's added tokens, the rest canonically encoded,
    or (`split="bytes"`) one byte-level token per byte."""
    return marked_ids(tokenizer, text, MARKUP, split=split)


def param(key: str, is_string: str, value: str) -> str:
    return f'<｜DSML｜parameter name="{key}" string="{is_string}">{value}</｜DSML｜parameter>'


def invoke(name: str, *params: tuple[str, str, str]) -> str:
    return f'<｜DSML｜invoke name="{name}">\n' + "\n".join(param(*p) for p in params) + "\n</｜DSML｜invoke>"


def block(*invokes: str, version: str = "v4") -> str:
    name = "tool_calls" if version == "v4" else "function_calls"
    return f"\n\n<｜DSML｜{name}>\n" + "\n".join(invokes) + f"\n</｜DSML｜{name}>"


def v41(text: str) -> str:
    """V4 DSML markup as V4.1 spells it: `<｜DSML｜ calls>`, `<｜DSML｜ invoke …>`, `<｜DSML｜ parameter …>`."""
    return (text.replace("｜DSML｜tool_calls", "｜DSML｜ calls").replace("｜DSML｜invoke", "｜DSML｜ invoke")
            .replace("｜DSML｜parameter", "｜DSML｜ parameter"))


def parse(fmt, ids: list[int], sizes=None, tools=TOOLS) -> list[tuple[str, str | None, str]]:
    return items(feed(fmt.parser(tools), ids, sizes))


def parse_items(fmt, ids: list[int]) -> list[Item]:
    return family_render.turn_items(fmt, ids, TOOLS)


AGENT_TURN = ("Running them in 東京's repo 🗼." + block(
    invoke("shell", ("command", "false", '["pytest", "-q"]'), ("workdir", "true", "/srv/app"),
           ("timeout_ms", "false", "60000")),
    invoke("read_file", ("path", "true", "pyproject.toml"))) + "<｜end▁of▁sentence｜>")
AGENT_ITEMS = [
    ("text", None, "Running them in 東京's repo 🗼."),
    ("tool_call", "shell", '{"command": ["pytest", "-q"], "workdir": "/srv/app", "timeout_ms": 60000}'),
    ("tool_call", "read_file", '{"path": "pyproject.toml"}'),
]


def test_the_format_speaks_dsml(deepseek_v4_format, deepseek_v32_format):
    assert (deepseek_v4_format.tool_calls, deepseek_v32_format.tool_calls) == ("dsml_v4", "dsml_v32")
    for fmt in (deepseek_v4_format, deepseek_v32_format):
        assert fmt.stop_token_ids == [EOS] and fmt.turn_terminators == frozenset({EOS})
        assert fmt.turn_openers == frozenset()


def test_single_call_streams_one_parameter_at_a_time(deepseek_v4_chat_format, deepseek_v4_tokenizer):
    ids = ids_of(deepseek_v4_tokenizer, block(invoke("shell", ("workdir", "true", "/a b"), ("timeout_ms", "false", "5"))))
    assert feed(deepseek_v4_chat_format.parser(TOOLS), ids, [1] * len(ids)) == [
        ItemStarted(0, "tool_call", name="shell"), ItemDelta(0, "{"), ItemDelta(0, '"workdir": "/a b"'),
        ItemDelta(0, ', "timeout_ms": 5'), ItemDelta(0, "}"), ItemDone(0, '{"workdir": "/a b", "timeout_ms": 5}')]


def test_text_and_parallel_calls(deepseek_v4_chat_format, deepseek_v4_tokenizer):
    assert parse(deepseek_v4_chat_format, ids_of(deepseek_v4_tokenizer, AGENT_TURN)) == AGENT_ITEMS


def test_reasoning_then_a_call_in_thinking_mode(deepseek_v4_format, deepseek_v4_tokenizer):
    """V4's default: the prompt opens `<think>`, the model reasons, closes it, then calls."""
    ids = ids_of(deepseek_v4_tokenizer, "Read the file first.</think>" + block(invoke("read_file", ("path", "true", "a")))
                 + "<｜end▁of▁sentence｜>")
    assert parse(deepseek_v4_format, ids) == [("reasoning", None, "Read the file first."),
                                              ("tool_call", "read_file", '{"path": "a"}')]
    parser = deepseek_v4_format.parser(TOOLS)
    parser.feed(ids)
    assert parser.reasoning_tokens == ids.index(KNOWN_IDS["</think>"]) + 1


def test_v32_writes_function_calls(deepseek_v32_format, deepseek_v4_tokenizer):
    v32 = block(invoke("read_file", ("path", "true", "a")), version="v32")
    assert parse(deepseek_v32_format, ids_of(deepseek_v4_tokenizer, "ok" + v32)) == [
        ("text", None, "ok"), ("tool_call", "read_file", '{"path": "a"}')]
    v4 = block(invoke("read_file", ("path", "true", "a")))  # the other version's block is text
    assert parse(deepseek_v32_format, ids_of(deepseek_v4_tokenizer, "ok" + v4)) == [("text", None, "ok" + v4)]


@pytest.mark.parametrize(("params", "arguments"), [
    ((("timeout_ms", "true", "5"),), '{"timeout_ms": 5}'),  # an integer parameter: 5 whatever the attribute says
    ((("workdir", "false", "5"),), '{"workdir": "5"}'),  # a string parameter stays text
    ((("command", "false", '["a", "b c"]'),), '{"command": ["a", "b c"]}'),
    ((("login", "false", "true"), ("env", "false", '{"A": 1}')), '{"login": true, "env": {"A": 1}}'),
    ((("login", "true", "False"),), '{"login": false}'),
    ((("timeout_ms", "false", "soon"),), '{"timeout_ms": "soon"}'),  # unparsable: its text
    ((("other", "false", "[1, 2]"), ("more", "true", "[1]")), '{"other": [1, 2], "more": "[1]"}'),  # undeclared
    ((("workdir", "true", "a"), ("workdir", "true", "b")), '{"workdir": "a"}'),  # a key twice: the first
    ((("workdir", "true", ' x\n"y"\\ '),), '{"workdir": " x\\n\\"y\\"\\\\ "}'),
])
def test_values_are_typed_by_the_tool_schema(deepseek_v4_chat_format, deepseek_v4_tokenizer, params, arguments):
    ids = ids_of(deepseek_v4_tokenizer, block(invoke("shell", *params)))
    assert parse(deepseek_v4_chat_format, ids) == [("tool_call", "shell", arguments)]


def test_without_tools_any_name_is_a_call_and_values_keep_the_attribute(deepseek_v4_chat_format, deepseek_v4_tokenizer):
    ids = ids_of(deepseek_v4_tokenizer, block(invoke("anything", ("n", "false", "5"), ("s", "true", "5"))))
    assert parse(deepseek_v4_chat_format, ids, tools=()) == [("tool_call", "anything", '{"n": 5, "s": "5"}')]


def test_markup_spelled_in_text_pieces_is_text(deepseek_v4_chat_format, deepseek_v4_tokenizer):
    """Only the `｜DSML｜` id makes a tag: the same letters in text pieces are text, in an answer or a value."""
    spelled = '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="shell">'
    pieces = deepseek_v4_tokenizer._encode_without_added_tokens(spelled)
    assert KNOWN_IDS["｜DSML｜"] not in pieces
    assert parse(deepseek_v4_chat_format, pieces) == [("text", None, spelled)]
    ids = [*ids_of(deepseek_v4_tokenizer, '\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="shell">\n'
                                          '<｜DSML｜parameter name="workdir" string="true">'),
           *deepseek_v4_tokenizer._encode_without_added_tokens("a</｜DSML｜parameter></｜DSML｜invoke>"),
           *ids_of(deepseek_v4_tokenizer, "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>")]
    assert parse(deepseek_v4_chat_format, ids) == [("tool_call", "shell", '{"workdir": "a</｜DSML｜parameter></｜DSML｜invoke>"}')]


MALFORMED = [
    # (output, items)
    (block(invoke("no_such_tool", ("a", "true", "b"))),  # names are checked against the request's tools
     [("text", None, '<｜DSML｜invoke name="no_such_tool">\n' + param("a", "true", "b") + "\n</｜DSML｜invoke>")]),
    (block(invoke("no", ("a", "true", "b")), invoke("read_file", ("path", "true", "x"))),  # the next call survives
     [("text", None, '<｜DSML｜invoke name="no">\n' + param("a", "true", "b") + "\n</｜DSML｜invoke>"),
      ("tool_call", "read_file", '{"path": "x"}')]),
    ("a <｜DSML｜toolcalls> b", [("text", None, "a <｜DSML｜toolcalls> b")]),  # no block: text
    ("a <｜DSML｜ b <｜DSML｜", [("text", None, "a <｜DSML｜ b <｜DSML｜")]),
    ("x｜DSML｜y", [("text", None, "x｜DSML｜y")]),
    (('\n\n<｜DSML｜tool_calls>\njunk\n<｜DSML｜invoke name="read_file">\nmore junk'  # junk between tags is dropped
     '<｜DSML｜parameter name="path" string="true">p</｜DSML｜parameter>junk\n</｜DSML｜invoke>\nafter junk'
     "\n</｜DSML｜tool_calls>"), [("tool_call", "read_file", '{"path": "p"}')]),
    (('\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="shell">\n'  # a missing </parameter>: the next tag ends it
     '<｜DSML｜parameter name="workdir" string="true">/a\n<｜DSML｜parameter name="timeout_ms" string="false">3\n'
     "</｜DSML｜invoke>"), [("tool_call", "shell", '{"workdir": "/a\\n", "timeout_ms": 3}')]),
    ('\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="shell">\n<｜DSML｜parameter name="workdir" string="true">/t',
     [("tool_call", "shell", '{"workdir": "/t"}')]),  # cut mid-value: the call keeps what it has
    ('\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="shel', [("text", None, '<｜DSML｜invoke name="shel')]),
    ("\n\n<｜DSML｜tool_calls>\n", []),  # a block cut before any call: nothing
    ("\n\n<｜DSML｜tool_call", [("text", None, "<｜DSML｜tool_call")]),  # the opening tag cut short: text
    (block(invoke("read_file", ("path", "true", "a"))) + "\nafter", [("tool_call", "read_file", '{"path": "a"}'),
                                                                      ("text", None, "after")]),
    ("done</think>", [("text", None, "done</think>")]),
    (('\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="shell">\n<｜DSML｜parameter name="workdir">/x</｜DSML｜parameter>\n'
     "</｜DSML｜tool_calls>"), [("tool_call", "shell", '{"workdir": "/x"}')]),  # no string attribute, no </invoke>
]


FRAGMENTS = [*MARKUP, "<", "</", "tool_calls>", "function_calls>", 'invoke name="', "shell", '">', "invoke>",
             "parameter", ' name="workdir"', ' string="true"', ' string="false"', ">", "parameter>", "\n", " ", "5",
             '"', "é", "東京", "x", "[1", "]"]


# The contract every family's parser keeps (tests/formats/test_family_contract.py checks it).
CONTRACT = OutputContract(
    "dsml_v4", format="deepseek_v4_chat_format", tokenizer="deepseek_v4_tokenizer", markup=MARKUP, tools=TOOLS,
    agent_turn=AGENT_TURN, agent_items=AGENT_ITEMS, malformed=MALFORMED, fragments=FRAGMENTS,
    split_turn=("ok <" + block(invoke("shell", ("command", "false", '["a"]'), ("workdir", "true", "é/東京 x"))) + "<｜end▁of▁sentence｜>"),
    split_items=[("text", None, "ok <"), ("tool_call", "shell", '{"command": ["a"], "workdir": "é/東京 x"}')],
    fuzz_format="deepseek_v4_format",
    examples=400,
)

V41_CONTRACT = OutputContract(
    "dsml_v41",
    format="deepseek_v41_chat_format",
    tokenizer="deepseek_v41_tokenizer",
    markup=MARKUP,
    tools=TOOLS,
    agent_turn=v41(AGENT_TURN),
    agent_items=AGENT_ITEMS,
    split_turn=v41(CONTRACT.split_turn),
    split_items=CONTRACT.split_items,
    malformed=[(v41(output), [(kind, name, v41(text)) for kind, name, text in expected])
               for output, expected in MALFORMED],
    fragments=[*MARKUP, "<", "</", " calls>", "tool_calls>", ' invoke name="', "shell", '">', " invoke>",
               " parameter", ' name="workdir"', ' string="true"', ' string="false"', ">", " parameter>", "\n", " ",
               "5", '"', "é", "東京", "x", "[1", "]"],
    fuzz_format="deepseek_v41_format",
    examples=400,
)


def test_v41_reads_only_its_own_spelling(deepseek_v41_chat_format, deepseek_v41_tokenizer):
    v4 = block(invoke("read_file", ("path", "true", "a")))
    assert parse(deepseek_v41_chat_format, ids_of(deepseek_v41_tokenizer, "ok" + v41(v4))) == [
        ("text", None, "ok"), ("tool_call", "read_file", '{"path": "a"}')]
    assert parse(deepseek_v41_chat_format, ids_of(deepseek_v41_tokenizer, "ok" + v4)) == [("text", None, "ok" + v4)]
