"""Step-3.5/3.7: Qwen3's XML calls in ChatML turns after a prompt that always opens `<think>`, read off
the published Step-3.7-Flash template (a stand-in vocabulary with Step's control tokens:
tests/support/stand_in_families.py)."""

from __future__ import annotations

from gateway.formats._shared import qwen_messages as template_messages
from tests.formats.test_qwen_xml_parser import call
from tests.support.family_contract import AGENT_CALLS, TOOLS, XML_FRAGMENTS, Case, OutputContract, RenderContract
from tests.support.stand_in_families import STEP3P5

IDS = STEP3P5.ids()
MARKUP = {token: IDS[token] for token in ("<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>",
                                          "<|im_start|>")}

AGENT_TURN = ("The tests, in 東京's repo 🗼.\n</think>\nRunning them.\n"
              + call("shell", ("command", '["pytest", "-q"]'), ("workdir", "/srv/app"), ("timeout_ms", "60000"))
              + call("read_file", ("path", "pyproject.toml")) + "<|im_end|>")
AGENT_ITEMS = [("reasoning", None, "The tests, in 東京's repo 🗼."), ("text", None, "Running them."),
               *AGENT_CALLS]


MALFORMED = [
    ("<tool_call>\n<function={{ name }}>\n</function>\n</tool_call>",
     [("text", None, "<tool_call>\n<function={{ name }}>\n</function>\n</tool_call>")]),
    ("<tool_call>\n<function=shell>\n<parameter=workdir>\n/tm", [("tool_call", "shell", '{"workdir": "/tm"}')]),
    ("</tool_call> stray", [("text", None, "</tool_call> stray")]),
    ("done</think>", [("text", None, "done</think>")]),
]

CONTRACT = OutputContract(
    "step3p5", format="step3p5_format", tokenizer="step3p5_tokenizer", markup=MARKUP, tools=TOOLS,
    agent_turn=AGENT_TURN, agent_items=AGENT_ITEMS, malformed=MALFORMED, fragments=[*MARKUP, *XML_FRAGMENTS],
    split_turn="\n</think>\n" + call("shell", ("command", '["a"]'), ("workdir", "é/</parameter>x")) + "<|im_end|>",
    split_items=[("tool_call", "shell", '{"command": ["a"], "workdir": "é/</parameter>x"}')],
    prefix="\n</think>\n",
    cut_call=("\n</think>\n<tool_call>\n<function=shell>\n<parameter=workdir>\n/srv", "shell", '{"workdir": "/srv',
              '{"workdir": "/srv"}'),
    json_arguments=True,
    stops=[IDS["<|im_end|>"]],
    # The prompt opened `<think>`: the output starts as reasoning.
    cases=[Case("Checking.", [("reasoning", None, "Checking.")], about="starts-in-reasoning")],
)
RENDER = RenderContract("step3p5", "step3p5_format", "step3p5_tokenizer", template_messages, seed=35)
