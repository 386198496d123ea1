"""Llama 4's and Llama 3.2's pythonic calls (`[f(a=1), g(b="x")]` as the whole answer), read off vLLM's
pythonic templates for them (stand-in vocabularies with their control tokens: tests/support/stand_in_families.py)."""

from __future__ import annotations

import pytest

from gateway.formats._pythonic import parse_pythonic
from gateway.formats._shared import with_argument_dicts
from tests.support.family_contract import TOOLS, OutputContract, RenderContract
from tests.support.stand_in_families import LLAMA4, LLAMA32

IDS = LLAMA4.ids()
MARKUP = {token: IDS[token] for token in ("<|eot|>", "<|eom|>", "<|python_start|>", "<|header_start|>")}

AGENT_TURN = ('[shell(command=["pytest", "-q"], workdir="/srv/東京 🗼", timeout_ms=60000), '
              "read_file(path='pyproject.toml')]<|eot|>")
AGENT_ITEMS = [
    ("tool_call", "shell", '{"command": ["pytest", "-q"], "workdir": "/srv/東京 🗼", "timeout_ms": 60000}'),
    ("tool_call", "read_file", '{"path": "pyproject.toml"}'),
]


def test_the_format_reads_pythonic_calls_off_the_template(llama4_format):
    assert llama4_format.tool_calls == "llama4_pythonic"
    assert llama4_format.stop_token_ids == [IDS["<|eot|>"], IDS["<|eom|>"], IDS["<|end_of_text|>"]]


@pytest.mark.parametrize(("text", "expected"), [
    ("[f(a=1, b='x', c=[true, None], d={'k': -2.5})]", [("f", '{"a": 1, "b": "x", "c": [true, null], "d": {"k": -2.5}}')]),
    ("[f()]", [("f", "{}")]),
    ("[f(1)]", None),  # a positional argument
    ("[f(a=g())]", None),  # not a literal
    ("[f(**k)]", None),
    ("[]", None),
    ("[1, 2]", None),
    ("f(a=1)", None),  # not a list
    ("[f(a=1)", None),  # cut off
])
def test_what_is_a_list_of_calls(text, expected):
    assert parse_pythonic(text) == expected


MALFORMED = [
    ("[rm(path='/')]<|eot|>", [("text", None, "[rm(path='/')]")]),  # not one of the request's tools
    ("[1, 2] is a list.<|eot|>", [("text", None, "[1, 2] is a list.")]),
    ("Sure: [read_file(path='a')]<|eot|>", [("text", None, "Sure: [read_file(path='a')]")]),
    ("[read_file(path='a", [("text", None, "[read_file(path='a")]),  # cut off: text
]
FRAGMENTS = [*MARKUP, "[", "]", "read_file(", "shell(", "path=", "'a'", '"b"', ", ", ")", "=", "true", "None", "é",
             "東京", "x", " "]

CONTRACT = OutputContract(
    "llama4_pythonic", format="llama4_format", tokenizer="llama4_tokenizer", markup=MARKUP, tools=TOOLS,
    agent_turn=AGENT_TURN, agent_items=AGENT_ITEMS, malformed=MALFORMED, fragments=FRAGMENTS,
    split_turn="<|python_start|>[shell(command=['a'], workdir='é/東京)x')]<|eot|>",
    split_items=[("tool_call", "shell", '{"command": ["a"], "workdir": "é/東京)x"}')],
    json_arguments=True,
)
RENDER = RenderContract("llama4_pythonic", "llama4_format", "llama4_tokenizer", with_argument_dicts, seed=4)

LLAMA32_MARKUP = {token: LLAMA32.ids()[token] for token in ("<|eot_id|>", "<|eom_id|>", "<|python_tag|>",
                                                             "<|start_header_id|>")}
LLAMA32_TURN = AGENT_TURN.replace("<|eot|>", "<|eot_id|>")


def test_llama32_reads_the_same_calls_in_llama3_turns(llama32_format):
    assert llama32_format.tool_calls == "pythonic"
    assert llama32_format.stop_token_ids == [LLAMA32.ids()[t] for t in ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")]


LLAMA32_CONTRACT = OutputContract(
    "pythonic", format="llama32_format", tokenizer="llama32_tokenizer", markup=LLAMA32_MARKUP, tools=TOOLS,
    agent_turn=LLAMA32_TURN, agent_items=AGENT_ITEMS,
    split_turn="<|python_tag|>[shell(command=['a'], workdir='é/東京)x')]<|eot_id|>",
    split_items=[("tool_call", "shell", '{"command": ["a"], "workdir": "é/東京)x"}')],
    malformed=[(output.replace("<|eot|>", "<|eot_id|>"), items) for output, items in MALFORMED],
    fragments=[*LLAMA32_MARKUP, *FRAGMENTS[len(MARKUP):]], json_arguments=True)
LLAMA32_RENDER = RenderContract("pythonic", "llama32_format", "llama32_tokenizer", with_argument_dicts, seed=32)
