"""JSON calls in families of their own: as the whole answer in Llama 4 with vLLM's JSON template
(`{"name": …, "parameters": {…}}`, Llama 4's turns), xLAM (`[{"name": …, "arguments": {…}}]`) and
Phi-4-mini (`functools[{…}]`); between marker tokens in InternLM2 (`<|action_start|><|plugin|>\n{…}
<|action_end|>`) and Apertus (`<|tools_prefix|>[{NAME: {…}}, …]<|tools_suffix|>`); read off vLLM's templates for them (stand-in vocabularies with each family's control
tokens: tests/support/stand_in_families.py)."""

from __future__ import annotations

from gateway.formats._shared import merge_system_messages, with_argument_dicts
from tests.support.family_contract import TOOLS, OutputContract, RenderContract
from tests.support.stand_in_families import APERTUS, INTERNLM2, LLAMA4_JSON, PHI4_MINI, XLAM

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
INTERNLM2_MARKUP = markup(INTERNLM2, "<|action_start|>", "<|action_end|>", "<|plugin|>", "<|interpreter|>", "<|im_end|>",
                          "<|im_start|>", "</s>")
APERTUS_MARKUP = markup(APERTUS, "<|tools_prefix|>", "<|tools_suffix|>", "<|assistant_end|>", "<|assistant_start|>",
                        "<|inner_prefix|>", "<|inner_suffix|>")
LLAMA4_TURN = SHELL_CALL.replace('"arguments"', '"parameters"') + "; " + READ_CALL + "<|eot|>"
XLAM_TURN = f"[{SHELL_CALL}, {READ_CALL}]<|im_end|>"
PHI4_TURN = f"functools[{SHELL_CALL}, {READ_CALL}]<|end|>"


def internlm2_action(call: str) -> str:
    """One call as InternLM2 writes it: its `<|plugin|>` action."""
    return f"<|action_start|><|plugin|>\n{call}<|action_end|>"


def apertus_calls(*calls: str) -> str:
    """Calls (`{NAME: {…}}` each) as Apertus writes them: one list between its markers."""
    return "<|tools_prefix|>[" + ", ".join(calls) + "]<|tools_suffix|>"


APERTUS_TURN = "Running them 🗼." + apertus_calls(
    '{"shell": {"command": ["pytest", "-q"], "workdir": "/srv/東京 🗼", "timeout_ms": 60000}}',
    '{"read_file": {"path": "pyproject.toml"}}')
INTERNLM2_TURN = "Running them 🗼." + internlm2_action(SHELL_CALL) + internlm2_action(READ_CALL) + "<|im_end|>"


def test_the_formats_read_their_calls_off_the_templates(llama4_json_format, xlam_format, phi4_mini_format):
    assert [f.tool_calls for f in (llama4_json_format, xlam_format, phi4_mini_format)] == [
        "llama4_json", "xlam", "phi4_mini_json"]
    assert phi4_mini_format.stop_token_ids == [PHI4_MINI.ids()["<|endoftext|>"], PHI4_MINI.ids()["<|end|>"]]


def test_internlm2_reads_its_plugin_actions(internlm2_format):
    """The template's call (`"arguments"`) and the model's own prompts' (`"parameters"`) are calls; an
    `<|interpreter|>` action is not a function call, and stays the text the model wrote."""
    assert internlm2_format.tool_calls == "internlm"
    assert internlm2_format.stop_token_ids == [INTERNLM2.ids()["</s>"], INTERNLM2.ids()["<|im_end|>"]]
    parse = INTERNLM2_CONTRACT.parse
    ids = INTERNLM2_CONTRACT.ids(internlm2_format.tokenizer, internlm2_action(
        '{"name": "read_file", "parameters": {"path": "a.py"}}') + "<|im_end|>")
    assert parse(internlm2_format, ids) == [("tool_call", "read_file", '{"path": "a.py"}')]


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
INTERNLM2_CONTRACT = OutputContract(
    "internlm", format="internlm2_format", tokenizer="internlm2_tokenizer", markup=INTERNLM2_MARKUP, tools=TOOLS,
    agent_turn=INTERNLM2_TURN, agent_items=[("text", None, "Running them 🗼."), *ITEMS],
    split_turn=internlm2_action('{"name": "shell", "arguments": {"command": ["a"], "workdir": "é/東京]x"}}') + "<|im_end|>",
    split_items=SPLIT_ITEMS, malformed=[
        ("<|action_start|><|interpreter|>\nprint(1)<|action_end|><|im_end|>",
         [("text", None, "<|action_start|><|interpreter|>\nprint(1)<|action_end|>")]),
        ("<|action_start|><|plugin|>\nnot json<|action_end|><|im_end|>",
         [("text", None, "<|action_start|><|plugin|>\nnot json<|action_end|>")]),
        ('<|action_start|>{"name": "read_file", "arguments": {}}<|action_end|>',
         [("text", None, '<|action_start|>{"name": "read_file", "arguments": {}}<|action_end|>')]),
        ('<|action_start|><|plugin|>\n{"name": "read_file", "arguments": {"path": "a',
         [("text", None, '<|action_start|><|plugin|>\n{"name": "read_file", "arguments": {"path": "a')]),
        ("<|action_end|> stray <|plugin|>", [("text", None, "<|action_end|> stray <|plugin|>")]),
    ], fragments=[*INTERNLM2_MARKUP, *FRAGMENTS], json_arguments=True)
APERTUS_CONTRACT = OutputContract(
    "apertus", format="apertus_format", tokenizer="apertus_tokenizer", markup=APERTUS_MARKUP, tools=TOOLS,
    agent_turn=APERTUS_TURN, agent_items=[("text", None, "Running them 🗼."), *ITEMS],
    split_turn=apertus_calls('{"shell": {"command": ["a"], "workdir": "é/東京]x"}}'), split_items=SPLIT_ITEMS,
    malformed=[
        ('<|tools_prefix|>[{"read_file": "a"}]<|tools_suffix|>', [("text", None, '<|tools_prefix|>[{"read_file": "a"}]<|tools_suffix|>')]),
        ("<|tools_prefix|>[]<|tools_suffix|>", [("text", None, "<|tools_prefix|>[]<|tools_suffix|>")]),
        ('<|tools_prefix|>[{"read_file": {"path": "a', [("text", None, '<|tools_prefix|>[{"read_file": {"path": "a')]),
        ('[{"read_file": {}}]<|assistant_end|>', [("text", None, '[{"read_file": {}}]')]),
    ], fragments=[*APERTUS_MARKUP, *FRAGMENTS, '"read_file": ', '{"read_file": {}}'], json_arguments=True)
CONTRACTS = [LLAMA4_CONTRACT, XLAM_CONTRACT, PHI4_CONTRACT, INTERNLM2_CONTRACT, APERTUS_CONTRACT]
RENDERS = [RenderContract("llama4_json", "llama4_json_format", "llama4_json_tokenizer", with_argument_dicts, seed=41),
           RenderContract("xlam", "xlam_format", "xlam_tokenizer", with_argument_dicts, seed=5),
           RenderContract("phi4_mini_json", "phi4_mini_format", "phi4_mini_tokenizer", seed=6),
           RenderContract("internlm", "internlm2_format", "internlm2_tokenizer", merge_system_messages, seed=8),
           RenderContract("apertus", "apertus_format", "apertus_tokenizer", merge_system_messages, seed=9)]
