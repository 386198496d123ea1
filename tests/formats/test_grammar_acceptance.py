"""The structural tags the gateway sends accept the model's native output and nothing else, as
vLLM's own grammar engine (xgrammar, in the vLLM virtualenv) reads them: gpt-oss harmony's
forced calls and JSON answers, and Qwen3's `max_tool_calls`. A random model cannot show this
for harmony (it would think forever in the free analysis channel), so each tag is fed the
texts a model would write, as tokens, ending with its stop token."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gateway.core.conversation import Tool, ToolGrammar
from gateway.core.sampling import OutputConstraint
from gateway.formats.hf.constraints import structured_outputs as hf_structured_outputs
from gateway.ops.vllm_process import VLLMError, vllm_python
from tests.support.qwen3_tokens import END_THINK, END_TOOL_CALL, THINK, TOOL_CALL

pytestmark = pytest.mark.vllm

CHECK = Path(__file__).parents[1] / "support" / "xgrammar_check.py"
PARAMS = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}
TOOLS = [Tool(name="exec_command", parameters=PARAMS), Tool(name="read_file", parameters={"type": "object"})]
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


def _accepts(tokenizer_dir: Path, vocab_size: int, stop_ids: list[int], checks: list[tuple[dict, list[str]]]
             ) -> list[list[bool]]:
    """Per (structured outputs, texts): whether vLLM's grammar engine accepts each text."""
    try:
        python = vllm_python()
    except VLLMError as exc:
        pytest.skip(str(exc))
    spec = {"tokenizer": str(tokenizer_dir), "vocab_size": vocab_size, "stop_ids": stop_ids,
            "checks": [{"tag": json.loads(structured["structural_tag"]), "cases": cases}
                       for structured, cases in checks]}
    done = subprocess.run([str(python), str(CHECK)], input=json.dumps(spec), capture_output=True, text=True,
                          timeout=600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


ANALYSIS = "<|channel|>analysis<|message|>Need to run it.<|end|><|start|>assistant"
CALL = '<|channel|>commentary to=functions.exec_command <|constrain|>json<|message|>{"cmd": "ls"}<|call|>'
FINAL_JSON = '<|channel|>final<|message|>{"answer": 4}<|return|>'
FINAL_TEXT = "<|channel|>final<|message|>Hello.<|return|>"
CUSTOM = Tool(name="patch", parameters={"type": "object", "properties": {"input": {"type": "string"}}},
              grammar=ToolGrammar("regex", r"[a-z]+ \d+"))
PATCH = '<|channel|>commentary to=functions.patch <|constrain|>json<|message|>{"input": "add 12"}<|call|>'
PREAMBLE = "<|channel|>commentary<|message|>Patching it.<|end|><|start|>assistant"


HARMONY = {
    "required": (OutputConstraint(tool_choice="required"), TOOLS,
                 {CALL: True, ANALYSIS + CALL: True, FINAL_TEXT: False, CALL.replace("exec_command", "rm"): False,
                  CALL.replace('"ls"', "1"): False}),
    "json": (OutputConstraint(answer_schema=SCHEMA), [],
             {FINAL_JSON: True, ANALYSIS + FINAL_JSON: True, FINAL_TEXT: False, CALL: False}),
    "json-or-call": (OutputConstraint(answer_schema=SCHEMA), TOOLS,
                     {FINAL_JSON: True, ANALYSIS + CALL: True, FINAL_TEXT: False}),
    "allowed-auto": (OutputConstraint(allowed_tools=("read_file",)), TOOLS,
                     {FINAL_TEXT: True, ANALYSIS + FINAL_TEXT: True, CALL: False,
                      "<|channel|>commentary to=functions.read_file <|constrain|>json<|message|>{}<|call|>": True}),
    # tool_choice auto with a custom tool (the turn's grammars-only constraint): its input by its
    # grammar, the function's arguments and everything around the call free
    "custom-auto": (OutputConstraint(), [TOOLS[0], CUSTOM],
                    {FINAL_TEXT: True, ANALYSIS + FINAL_TEXT: True, CALL: True, CALL.replace('"ls"', "1"): True,
                     PATCH: True, ANALYSIS + PREAMBLE + PATCH: True, PATCH.replace("add 12", "Add 12"): False,
                     PATCH.replace("add 12", "add"): False, CALL.replace("exec_command", "rm"): False}),
}


def test_harmony_tags_accept_gpt_oss_output_only(harmony_format):
    from tests.support.o200k import harmony_tokenizer_dir

    checks = [(harmony_format.structured_outputs(constraint, tools), list(cases))
              for constraint, tools, cases in HARMONY.values()]
    got = _accepts(harmony_tokenizer_dir(), 201088, [200002, 200012], checks)
    assert {name: dict(zip(cases, accepted)) for (name, (_, _, cases)), accepted in zip(HARMONY.items(), got)} \
        == {name: cases for name, (_, _, cases) in HARMONY.items()}


class _Qwen3Markers:
    think_open, think_close, call_open, call_close = THINK, END_THINK, TOOL_CALL, END_TOOL_CALL


def test_qwen3_max_tool_calls_accepts_up_to_that_many_calls(qwen_tokenizer_dir):
    call = '<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n</tool_call>'
    end = "<|im_end|>"

    def tag(constraint: OutputConstraint) -> dict:
        return hf_structured_outputs(constraint, TOOLS[:1], calls="hermes", markers=_Qwen3Markers,
                                     starts_in_reasoning=False)

    calls = [call + ("\n" + call) * more + end for more in range(3)]
    texts = ["Just text" + end, *("Let me see.\n" + c for c in calls)]
    forced, auto = _accepts(qwen_tokenizer_dir, 151936, [151645], [
        (tag(OutputConstraint(tool_choice="required", max_tool_calls=2)), calls),
        (tag(OutputConstraint(max_tool_calls=2)), texts)])
    assert forced == [True, True, False]
    assert auto == [True, True, True, False]
