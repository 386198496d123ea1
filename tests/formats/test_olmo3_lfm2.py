"""Olmo 3 (`<function_calls>` with a pythonic call a line) and LFM2 (`<|tool_call_start|>[…]<|tool_call_end|>`):
pythonic calls between marker tokens, read off vLLM's Olmo 3 template and the published LFM2.5 template
(stand-in vocabularies with each family's control tokens: tests/support/stand_in_families.py)."""

from __future__ import annotations

from gateway.formats._pythonic import lfm2_messages
from gateway.formats._shared import with_argument_dicts
from tests.support.family_contract import TOOLS, OutputContract, RenderContract
from tests.support.stand_in_families import LFM2, OLMO3

OLMO3_IDS, LFM2_IDS = OLMO3.ids(), LFM2.ids()
OLMO3_MARKUP = {t: OLMO3_IDS[t] for t in ("<function_calls>", "</function_calls>", "<think>", "</think>", "<|im_end|>")}
LFM2_MARKUP = {t: LFM2_IDS[t] for t in ("<|tool_call_start|>", "<|tool_call_end|>", "<think>", "</think>",
                                        "<|im_end|>")}
ITEMS = [
    ("reasoning", None, "The tests, in 東京's repo 🗼."),
    ("text", None, "Running them."),
    ("tool_call", "shell", '{"command": ["pytest", "-q"], "workdir": "/srv/app", "timeout_ms": 60000}'),
    ("tool_call", "read_file", '{"path": "pyproject.toml"}'),
]
OLMO3_TURN = ("<think>The tests, in 東京's repo 🗼.</think>Running them.\n<function_calls>\n"
              "shell(command=['pytest', '-q'], workdir='/srv/app', timeout_ms=60000)\nread_file(path='pyproject.toml')\n"
              "</function_calls><|im_end|>")
LFM2_TURN = ("<think>The tests, in 東京's repo 🗼.</think>Running them.<|tool_call_start|>"
             "[shell(command=['pytest', '-q'], workdir='/srv/app', timeout_ms=60000), read_file(path='pyproject.toml')]"
             "<|tool_call_end|><|im_end|>")


def test_the_formats_read_their_calls_off_the_templates(olmo3_format, lfm2_format):
    assert (olmo3_format.tool_calls, lfm2_format.tool_calls) == ("olmo3", "lfm2")
    assert olmo3_format.stop_token_ids == [OLMO3_IDS["<|im_end|>"], OLMO3_IDS["<|endoftext|>"]]
    assert lfm2_format.stop_token_ids == [LFM2_IDS["<|im_end|>"], LFM2_IDS["<|endoftext|>"]]


def _malformed(open_: str, close: str) -> list:
    return [
        (f"{open_}rm(path='/'){close}", [("text", None, f"{open_}rm(path='/'){close}")]),  # not a tool
        (f"{open_}read_file('a'){close}", [("text", None, f"{open_}read_file('a'){close}")]),  # positional
        (f"{open_}read_file(path='a", [("text", None, f"{open_}read_file(path='a")]),  # cut off: text
        (f"{close.strip()} stray", [("text", None, f"{close.strip()} stray")]),
        ("done</think>", [("text", None, "done</think>")]),
    ]


def _fragments(markup: dict) -> list[str]:
    return [*markup, "[", "]", "read_file(", "shell(", "path=", "'a'", '"b"', ", ", ")", "\n", "true", "é", "東京", " "]


OLMO3_CONTRACT = OutputContract(
    "olmo3", format="olmo3_format", tokenizer="olmo3_tokenizer", markup=OLMO3_MARKUP, tools=TOOLS,
    agent_turn=OLMO3_TURN, agent_items=ITEMS,
    split_turn="<function_calls>\nshell(command=['a'], workdir='é/東京)x')\n</function_calls><|im_end|>",
    split_items=[("tool_call", "shell", '{"command": ["a"], "workdir": "é/東京)x"}')],
    malformed=_malformed("<function_calls>\n", "\n</function_calls>"), fragments=_fragments(OLMO3_MARKUP),
    json_arguments=True)
LFM2_CONTRACT = OutputContract(
    "lfm2", format="lfm2_format", tokenizer="lfm2_tokenizer", markup=LFM2_MARKUP, tools=TOOLS,
    agent_turn=LFM2_TURN, agent_items=ITEMS,
    split_turn="<|tool_call_start|>[shell(command=['a'], workdir='é/東京)x')]<|tool_call_end|><|im_end|>",
    split_items=[("tool_call", "shell", '{"command": ["a"], "workdir": "é/東京)x"}')],
    malformed=_malformed("<|tool_call_start|>[", "]<|tool_call_end|>"), fragments=_fragments(LFM2_MARKUP),
    json_arguments=True)
OLMO3_RENDER = RenderContract("olmo3", "olmo3_format", "olmo3_tokenizer", with_argument_dicts, seed=3)
LFM2_RENDER = RenderContract("lfm2", "lfm2_format", "lfm2_tokenizer", lfm2_messages, seed=2)
