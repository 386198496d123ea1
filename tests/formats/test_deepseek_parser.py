"""DeepSeek-V3.1 tool calls: DeepSeek's token ids in, reasoning / text / tool-call items out, names
and arguments as written (vLLM's `deepseek_v31` parser), streamed as they arrive."""

from __future__ import annotations

import json

from gateway.formats.base import ItemDelta, ItemDone, ItemStarted
from gateway.formats.hf.format import HFChatFormat
from tests.support.deepseek import KNOWN_IDS
from tests.support.family_contract import TOOLS, Case, OutputContract

EOS = KNOWN_IDS["<｜end▁of▁sentence｜>"]
MARKUP = {token: KNOWN_IDS[token] for token in (
    "<think>", "</think>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<｜tool▁output▁begin｜>")}

def call(name: str, arguments: str) -> str:
    return f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{arguments}<｜tool▁call▁end｜>"


def section(*calls: str) -> str:
    return "<｜tool▁calls▁begin｜>" + "".join(calls) + "<｜tool▁calls▁end｜>"


# What DeepSeek-V3.1 writes after its non-thinking generation prompt (`<｜Assistant｜></think>`).
AGENT_TURN = ("Running them in 東京's repo 🗼.\n"
              + section(call("shell", '{"command": ["pytest", "-q"], "workdir": "/srv/app", "timeout_ms": 60000}'),
                        call("read_file", '{"path":"pyproject.toml"}'))
              + "<｜end▁of▁sentence｜>")
AGENT_ITEMS = [
    ("text", None, "Running them in 東京's repo 🗼.\n"),
    ("tool_call", "shell", '{"command": ["pytest", "-q"], "workdir": "/srv/app", "timeout_ms": 60000}'),
    ("tool_call", "read_file", '{"path":"pyproject.toml"}'),
]


def test_reasoning_then_a_call_in_thinking_mode(deepseek_tokenizer):
    """With the template's `thinking` on, the prompt opens `<think>`: the model starts reasoning."""
    thinking = HFChatFormat(deepseek_tokenizer, enable_thinking=True)
    ids = CONTRACT.ids(deepseek_tokenizer, "Read the file first.</think>" + section(call("read_file", '{"path": "a"}'))
                       + "<｜end▁of▁sentence｜>")
    assert CONTRACT.parse(thinking, ids) == [("reasoning", None, "Read the file first."),
                                    ("tool_call", "read_file", '{"path": "a"}')]
    parser = thinking.parser(TOOLS)
    parser.feed(ids)
    assert parser.reasoning_tokens == ids.index(KNOWN_IDS["</think>"]) + 1


def test_markers_spelled_in_text_pieces_are_arguments(deepseek_format, deepseek_tokenizer):
    """Only DeepSeek's single-id markers are structure; the same text in pieces (how content is
    rendered back) is part of the arguments."""
    value = json.dumps({"workdir": "a<｜tool▁call▁end｜><｜tool▁calls▁end｜><think>"}, ensure_ascii=False)
    ids = [*CONTRACT.ids(deepseek_tokenizer, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>shell<｜tool▁sep｜>"),
           *deepseek_tokenizer._encode_without_added_tokens(value),
           *CONTRACT.ids(deepseek_tokenizer, "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")]
    assert CONTRACT.parse(deepseek_format, ids) == [("tool_call", "shell", value)]


MALFORMED = [
    # (output, items)
    (section(call("no_such_tool", "{}")),  # names are checked against the request's tools
     [("text", None, "<｜tool▁call▁begin｜>no_such_tool<｜tool▁sep｜>{}<｜tool▁call▁end｜>")]),
    (section(call("{{ name }}", "{}")), [("text", None, "<｜tool▁call▁begin｜>{{ name }}<｜tool▁sep｜>{}<｜tool▁call▁end｜>")]),
    (section("<｜tool▁call▁begin｜>shell<｜tool▁call▁end｜>"),  # no separator: no call
     [("text", None, "<｜tool▁call▁begin｜>shell<｜tool▁call▁end｜>")]),
    (section("junk" + call("read_file", '{"path": "a"}') + "\n"),  # text between calls is dropped
     [("tool_call", "read_file", '{"path": "a"}')]),
    (section(call("no", "{}"), call("read_file", "{}")),  # one bad call does not take the next along
     [("text", None, "<｜tool▁call▁begin｜>no<｜tool▁sep｜>{}<｜tool▁call▁end｜>"), ("tool_call", "read_file", "{}")]),
    ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>shell<｜tool▁sep｜>{\"workdir\": \"/t",  # cut mid-arguments
     [("tool_call", "shell", '{"workdir": "/t')]),
    ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>read_file<｜tool▁sep｜>{}<｜tool▁calls▁end｜>",  # no call end
     [("tool_call", "read_file", "{}")]),
    ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>shel", [("text", None, "<｜tool▁call▁begin｜>shel")]),
    ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>shell<｜tool▁sep｜>{}<｜tool▁sep｜>x<｜tool▁call▁end｜>",
     [("tool_call", "shell", "{}<｜tool▁sep｜>x")]),  # a stray marker inside the arguments is arguments
    ("<｜tool▁call▁begin｜>x<｜tool▁sep｜>y<｜tool▁call▁end｜> stray <｜tool▁calls▁end｜>",  # outside a section: text
     [("text", None, "<｜tool▁call▁begin｜>x<｜tool▁sep｜>y<｜tool▁call▁end｜> stray <｜tool▁calls▁end｜>")]),
    ("done</think>", [("text", None, "done</think>")]),
    ("answer" + section(call("read_file", "{}")) + "after", [("text", None, "answer"),
                                                             ("tool_call", "read_file", "{}"), ("text", None, "after")]),
]


FRAGMENTS = [*MARKUP, "shell", "read_file", "workdir", "\n", " ", "<", '{"a": 1}', "é", "東京", "x", "}"]


CASES = [
    Case(section(call("read_file", '{"path": "src/a.py"}')) + "<｜end▁of▁sentence｜>",
         [("tool_call", "read_file", '{"path": "src/a.py"}')], events=[
             ItemStarted(0, "tool_call", name="read_file"),
             *(ItemDelta(0, piece) for piece in ('{"', "path", '":', ' "', "src", "/a", ".py", '"}')),  # its tokens
             ItemDone(0, '{"path": "src/a.py"}')], about="single-call-events"),
    # vLLM's deepseek_v31 passes the arguments on as written, typed or not, JSON or not.
    *(Case(section(call("shell", written)), [("tool_call", "shell", written)], about=f"arguments-as-written-{n}")
      for n, written in enumerate(('{"timeout_ms": "5"}', '{ "command" : "ls" }', "not json {", "",
                                   '{"a": "</think>"}'))),
    Case(section(call("anything", "{}")), [("tool_call", "anything", "{}")], tools=(), about="without-tools-any-name"),
]

# The contract every family's parser keeps (tests/formats/test_family_contract.py checks it).
CONTRACT = OutputContract(
    "deepseek", format="deepseek_format", tokenizer="deepseek_tokenizer", markup=MARKUP, tools=TOOLS,
    agent_turn=AGENT_TURN, agent_items=AGENT_ITEMS, malformed=MALFORMED, fragments=FRAGMENTS,
    split_turn=("ok " + section(call("shell", '{"command": ["a"], "workdir": "é/東京 x"}')) + "<｜end▁of▁sentence｜>"),
    split_items=[("text", None, "ok "), ("tool_call", "shell", '{"command": ["a"], "workdir": "é/東京 x"}')],
    cut_call=("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>shell<｜tool▁sep｜>{\"workdir\": \"/srv", "shell",
              '{"workdir": "/srv', '{"workdir": "/srv'),  # DeepSeek streams the arguments as written
    stops=[EOS],
    openers=[],
    cases=CASES,
)
