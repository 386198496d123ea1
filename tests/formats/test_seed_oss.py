"""Seed-OSS: Qwen3's XML calls and reasoning under `<seed:…>` tokens, read off the published template
(a stand-in vocabulary with Seed's control tokens: tests/support/stand_in_families.py)."""

from __future__ import annotations

from gateway.formats._shared import qwen_messages as template_messages
from tests.support.family_contract import AGENT_CALLS, TOOLS, XML_FRAGMENTS, OutputContract, RenderContract
from tests.support.stand_in_families import SEED_OSS

IDS = SEED_OSS.ids()
MARKUP = {token: IDS[token] for token in ("<seed:think>", "</seed:think>", "<seed:tool_call>", "</seed:tool_call>",
                                          "<seed:eos>", "<seed:bos>")}


def call(name: str, *params: tuple[str, str]) -> str:
    """A call as the template writes it (values without the newlines Qwen3.6 puts around them)."""
    body = "".join(f"<parameter={key}>{value}</parameter>\n" for key, value in params)
    return f"<seed:tool_call>\n<function={name}>\n{body}</function>\n</seed:tool_call>"


AGENT_TURN = ("<seed:think>The tests, in 東京's repo 🗼.</seed:think>\nRunning them.\n\n"
              + call("shell", ("command", '["pytest", "-q"]'), ("workdir", "/srv/app"), ("timeout_ms", "60000"))
              + "\n" + call("read_file", ("path", "pyproject.toml")) + "<seed:eos>")
AGENT_ITEMS = [("reasoning", None, "The tests, in 東京's repo 🗼."), ("text", None, "Running them."),
               *AGENT_CALLS]


MALFORMED = [
    ("<seed:tool_call>\n<function={{ name }}>\n</function>\n</seed:tool_call>",
     [("text", None, "<seed:tool_call>\n<function={{ name }}>\n</function>\n</seed:tool_call>")]),
    ("<seed:tool_call>\nnot a call\n</seed:tool_call>", [("text", None, "<seed:tool_call>\nnot a call\n</seed:tool_call>")]),
    ("<seed:tool_call>\n<function=shell>\n<parameter=workdir>/tm", [("tool_call", "shell", '{"workdir": "/tm"}')]),
    ("</seed:tool_call> stray", [("text", None, "</seed:tool_call> stray")]),
    ("done</seed:think>", [("text", None, "done</seed:think>")]),
]

CONTRACT = OutputContract(
    "seed_oss", format="seed_oss_format", tokenizer="seed_oss_tokenizer", markup=MARKUP, tools=TOOLS,
    agent_turn=AGENT_TURN, agent_items=AGENT_ITEMS, malformed=MALFORMED, fragments=[*MARKUP, *XML_FRAGMENTS],
    split_turn=call("shell", ("command", '["a"]'), ("workdir", "é/</parameter>x")) + "<seed:eos>",
    split_items=[("tool_call", "shell", '{"command": ["a"], "workdir": "é/</parameter>x"}')],
    cut_call=("<seed:tool_call>\n<function=shell>\n<parameter=workdir>/srv", "shell", '{"workdir": "/srv',
              '{"workdir": "/srv"}'),
    json_arguments=True,
    stops=[IDS["<seed:eos>"]],
)
RENDER = RenderContract("seed_oss", "seed_oss_format", "seed_oss_tokenizer", template_messages, seed=7)
