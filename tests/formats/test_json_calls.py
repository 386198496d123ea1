"""JSON calls as the whole answer in three more families: Llama 4 with vLLM's JSON template
(`{"name": …, "parameters": {…}}`, Llama 4's turns), xLAM (`[{"name": …, "arguments": {…}}]`) and
Phi-4-mini (`functools[{…}]`), read off vLLM's templates for them (stand-in vocabularies with each
family's control tokens: tests/support/stand_in_families.py)."""

from __future__ import annotations

from gateway.core.conversation import Tool
from gateway.formats.llama3_json import argument_dicts
from tests.support.family_contract import OutputContract, RenderContract
from tests.support.stand_in_families import LLAMA4_JSON, PHI4_MINI, XLAM

SHELL = Tool("shell", "Run a command.", {"type": "object", "properties": {
    "command": {"type": "array", "items": {"type": "string"}}, "workdir": {"type": "string"},
    "timeout_ms": {"type": "integer"}}})
READ = Tool("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})
TOOLS = [SHELL, READ]
ITEMS = [("tool_call", "shell", '{"command": ["pytest", "-q"], "workdir": "/srv/東京 🗼", "timeout_ms": 60000}'),
         ("tool_call", "read_file", '{"path": "pyproject.toml"}')]
SHELL_CALL = '{"name": "shell", "arguments": {"command": ["pytest", "-q"], "workdir": "/srv/東京 🗼", "timeout_ms": 60000}}'
READ_CALL = '{"name": "read_file", "arguments": {"path": "pyproject.toml"}}'
SPLIT_ITEMS = [("tool_call", "shell", '{"command": ["a"], "workdir": "é/東京]x"}')]


def markup(family, *tokens: str) -> dict[str, int]:
    ids = family.ids()
    return {token: ids[token] for token in tokens}


LLAMA4_MARKUP = markup(LLAMA4_JSON, "<|eot|>", "<|eom|>", "<|header_start|>")
XLAM_MARKUP = markup(XLAM, "<|im_end|>", "<|im_start|>", "<|endoftext|>")
PHI4_MARKUP = markup(PHI4_MINI, "<|end|>", "<|endoftext|>", "<|user|>")
LLAMA4_TURN = SHELL_CALL.replace('"arguments"', '"parameters"') + "; " + READ_CALL + "<|eot|>"
XLAM_TURN = f"[{SHELL_CALL}, {READ_CALL}]<|im_end|>"
PHI4_TURN = f"functools[{SHELL_CALL}, {READ_CALL}]<|end|>"


def test_the_formats_read_their_calls_off_the_templates(llama4_json_format, xlam_format, phi4_mini_format):
    assert [f.tool_calls for f in (llama4_json_format, xlam_format, phi4_mini_format)] == [
        "llama4_json", "xlam", "phi4_mini_json"]
    assert phi4_mini_format.stop_token_ids == [PHI4_MINI.ids()["<|endoftext|>"], PHI4_MINI.ids()["<|end|>"]]


def _malformed(before: str, after: str, end: str) -> list:
    return [
        (f'{before}{{"name": "rm", "arguments": {{}}}}{after}{end}', [("text", None, f'{before}{{"name": "rm", "arguments": {{}}}}{after}')]),
        (f'{before}{{"name": "read_file", "arguments": "a"}}{after}{end}',
         [("text", None, f'{before}{{"name": "read_file", "arguments": "a"}}{after}')]),
        (f'{before}{{"name": "read_file", "arguments": {{"path": "a', [("text", None, f'{before}{{"name": "read_file", "arguments": {{"path": "a')]),
        (f'Sure: {before}{READ_CALL}{after}{end}', [("text", None, f'Sure: {before}{READ_CALL}{after}')]),
    ]


FRAGMENTS = ["{", "}", "[", "]", '"name": ', '"read_file"', '"arguments": ', '"parameters": ', '{"path": "a"}', ", ",
             "; ", "functools", "\n", "é", "東京", "x", " "]

LLAMA4_CONTRACT = OutputContract(
    "llama4_json", format="llama4_json_format", tokenizer="llama4_json_tokenizer", markup=LLAMA4_MARKUP, tools=TOOLS,
    agent_turn=LLAMA4_TURN, agent_items=ITEMS,
    split_turn='{"name": "shell", "parameters": {"command": ["a"], "workdir": "é/東京]x"}}<|eot|>', split_items=SPLIT_ITEMS,
    malformed=_malformed("", "", "<|eot|>")[:1] + _malformed("", "", "<|eot|>")[2:], fragments=[*LLAMA4_MARKUP, *FRAGMENTS],
    json_arguments=True)
XLAM_CONTRACT = OutputContract(
    "xlam", format="xlam_format", tokenizer="xlam_tokenizer", markup=XLAM_MARKUP, tools=TOOLS,
    agent_turn=XLAM_TURN, agent_items=ITEMS,
    split_turn='[{"name": "shell", "arguments": {"command": ["a"], "workdir": "é/東京]x"}}]<|im_end|>',
    split_items=SPLIT_ITEMS, malformed=_malformed("[", "]", "<|im_end|>"), fragments=[*XLAM_MARKUP, *FRAGMENTS],
    json_arguments=True)
PHI4_CONTRACT = OutputContract(
    "phi4_mini_json", format="phi4_mini_format", tokenizer="phi4_mini_tokenizer", markup=PHI4_MARKUP, tools=TOOLS,
    agent_turn=PHI4_TURN, agent_items=ITEMS,
    split_turn='functools[{"name": "shell", "arguments": {"command": ["a"], "workdir": "é/東京]x"}}]<|end|>',
    split_items=SPLIT_ITEMS, malformed=_malformed("functools[", "]", "<|end|>"), fragments=[*PHI4_MARKUP, *FRAGMENTS],
    json_arguments=True)
CONTRACTS = [LLAMA4_CONTRACT, XLAM_CONTRACT, PHI4_CONTRACT]
RENDERS = [RenderContract("llama4_json", "llama4_json_format", "llama4_json_tokenizer", argument_dicts, seed=41),
           RenderContract("xlam", "xlam_format", "xlam_tokenizer", argument_dicts, seed=5),
           RenderContract("phi4_mini_json", "phi4_mini_format", "phi4_mini_tokenizer", seed=6)]
