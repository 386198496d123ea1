"""Kimi-K2 tool calls: Kimi's token ids in, reasoning / text / tool-call items out; heads
`functions.NAME:IDX` name the tool and are the call's id (vLLM's `kimi_k2` parser), arguments as
written, streamed as they arrive."""

from __future__ import annotations

from gateway.core.conversation import Tool
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted
from tests.support.family_contract import READ, Case, OutputContract
from tests.support.kimi import KNOWN_IDS

IM_END, EOS = KNOWN_IDS["<|im_end|>"], KNOWN_IDS["[EOS]"]
MARKUP = {token: KNOWN_IDS[token] for token in (
    "<think>", "</think>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
    "<|tool_call_end|>", "<|tool_call_argument_begin|>", "<|im_end|>", "<|im_user|>", "<|im_assistant|>",
    "<|im_middle|>", "[EOS]")}

SHELL = Tool("shell", "Run a command.", {"type": "object", "properties": {
    "command": {"type": "array", "items": {"type": "string"}}, "workdir": {"type": "string"}}})
TOOLS = [SHELL, READ]


def call(head: str, arguments: str) -> str:
    return f"<|tool_call_begin|>{head}<|tool_call_argument_begin|>{arguments}<|tool_call_end|>"


def section(*calls: str) -> str:
    return "<|tool_calls_section_begin|>" + "".join(calls) + "<|tool_calls_section_end|>"


# What Kimi-K2-Thinking writes after its generation prompt (`<|im_assistant|>assistant<|im_middle|>`).
AGENT_TURN = ("<think>The user wants the tests run in 東京's repo 🗼.</think>Running them.\n"
              + section(call("functions.shell:0", '{"command": ["pytest", "-q"], "workdir": "/srv/app"}'),
                        call("functions.read_file:1", '{"path":"pyproject.toml"}'))
              + "<|im_end|>")
AGENT_ITEMS = [
    ("reasoning", None, "The user wants the tests run in 東京's repo 🗼."),
    ("text", None, "Running them.\n"),
    ("tool_call", "shell", '{"command": ["pytest", "-q"], "workdir": "/srv/app"}'),
    ("tool_call", "read_file", '{"path":"pyproject.toml"}'),
]


def test_calls_keep_the_model_s_ids(kimi_format, kimi_tokenizer):
    events = CONTRACT.events(kimi_format, CONTRACT.ids(kimi_tokenizer, AGENT_TURN))
    assert [(e.name, e.call_id) for e in events if isinstance(e, ItemStarted) and e.kind == "tool_call"] == [
        ("shell", "functions.shell:0"), ("read_file", "functions.read_file:1")]


MALFORMED = [
    # (output, items)
    (section(call("functions.no_such_tool:0", "{}")),  # names are checked against the request's tools
     [("text", None, "<|tool_call_begin|>functions.no_such_tool:0<|tool_call_argument_begin|>{}<|tool_call_end|>")]),
    (section(call("shell", "{}")),  # a head that is not functions.NAME:IDX
     [("text", None, "<|tool_call_begin|>shell<|tool_call_argument_begin|>{}<|tool_call_end|>")]),
    (section(call("functions.shell:x", "{}")),
     [("text", None, "<|tool_call_begin|>functions.shell:x<|tool_call_argument_begin|>{}<|tool_call_end|>")]),
    (section(call("functions.{{ name }}:0", "{}")),
     [("text", None, "<|tool_call_begin|>functions.{{ name }}:0<|tool_call_argument_begin|>{}<|tool_call_end|>")]),
    ("<|tool_calls_section_begin|><|tool_call_begin|>functions.shell:0<|tool_call_argument_begin|>{\"a\": ",
     [("tool_call", "shell", '{"a": ')]),  # cut mid-arguments: what was streamed
    (section(call("functions.read_file:0", "not json")), [("tool_call", "read_file", "not json")]),
    ("<|tool_call_begin|>x<|tool_call_end|> stray <|tool_calls_section_end|>",  # outside a section: text
     [("text", None, "<|tool_call_begin|>x<|tool_call_end|> stray <|tool_calls_section_end|>")]),
    ("done</think>", [("text", None, "done</think>")]),
]


FRAGMENTS = [*MARKUP, "functions.shell:0", "functions.read_file:1", "shell", "\n", " ", "<", '{"a": 1}', "é",
             "東京", "x", "}"]


CASES = [
    Case(section(call("functions.read_file:0", '{"path": "src/a.py"}')) + "<|im_end|>",
         [("tool_call", "read_file", '{"path": "src/a.py"}')], events=[
             ItemStarted(0, "tool_call", name="read_file", call_id="functions.read_file:0"),
             *(ItemDelta(0, piece) for piece in ('{"', "path", '":', ' "', "src", "/a", ".py", '"}')),  # its tokens
             ItemDone(0, '{"path": "src/a.py"}')], about="single-call-events"),
    Case(section(call("functions.anything:7", "{}")), [("tool_call", "anything", "{}")], tools=(),
         about="without-tools-any-name"),
]

# The contract every family's parser keeps (tests/formats/test_family_contract.py checks it).
CONTRACT = OutputContract(
    "kimi", format="kimi_format", tokenizer="kimi_tokenizer", markup=MARKUP, tools=TOOLS,
    agent_turn=AGENT_TURN, agent_items=AGENT_ITEMS, malformed=MALFORMED, fragments=FRAGMENTS,
    split_turn=("<think>é</think>" + section(call("functions.shell:3", '{"workdir": "é/東京 x"}')) + "<|im_end|>"),
    split_items=[("reasoning", None, "é"), ("tool_call", "shell", '{"workdir": "é/東京 x"}')],
    stops=[EOS, IM_END],  # every stop id the template never writes closes a turn
    cases=CASES,
)
