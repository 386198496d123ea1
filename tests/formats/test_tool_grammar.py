"""Custom tools' grammars (Codex's freeform apply_patch, a regex tool) reach vLLM as an EBNF
element of the structural tag, spelled where the model writes the input: inside the JSON string
of a Qwen3 call, raw in a Qwen3.6 `<parameter=input>`. vLLM's own grammar engine (xgrammar, in
the vLLM virtualenv) then accepts a call exactly when its input parses by the tool's Lark grammar
(checked with the `lark` package on the same texts)."""

from __future__ import annotations

import json

import httpx
import pytest

from gateway.core.conversation import Tool, ToolGrammar
from gateway.core.sampling import OutputConstraint
from gateway.formats._tool_grammar import UnsupportedGrammar, ebnf
from gateway.formats.hf.constraints import structured_outputs
from tests.formats.test_grammar_acceptance import _accepts
from tests.support.apply_patch import APPLY_PATCH_TOOL, GRAMMAR, json_wrapped, parses
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_THINK, END_TOOL_CALL, IM_END, THINK, TOOL_CALL, ids
from tests.support.stack import fake_stack

PATCH = ("*** Begin Patch\n*** Add File: notes/a \"b\".txt\n+say \"hi\"\\n\tthere\n+\n*** Update File: src/app.py\n"
         "*** Move to: src/main.py\n@@ def greet():\n-print(\"Hi\")\n+print(\"Hello, world!\")\n \n"
         "*** Delete File: old.txt\n*** End Patch")
NOT_PATCHES = ["*** Begin Patch\n*** End Patch", "*** Begin Patch\n*** Add File: a\nhello\n*** End Patch",
               "*** Begin Patch\n*** Update File: a\n-x\n*** End Patch\n\n", "diff --git a/x b/x"]
SHELL = {"type": "function", "name": "exec_command",
         "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}


def _tool(syntax: str, definition: str, name: str = "apply_patch") -> Tool:
    return Tool(name=name, parameters={"type": "object", "properties": {"input": {"type": "string"}}},
                grammar=ToolGrammar(syntax, definition))


def test_a_lark_grammar_becomes_ebnf_of_its_json_spelling():
    grammar = ToolGrammar("lark", 'start: "say " WORD+ LF?\nWORD: /[a-z"]+ /\n%import common.LF')
    assert ebnf(grammar, json_string=False).splitlines() == [
        "root ::= r_start",
        "r___start_plus_0 ::= r___start_plus_0 t_WORD | t_WORD",
        "r_start ::= t___ANON_0 r___start_plus_0 | t___ANON_0 r___start_plus_0 t_LF",
        't_LF ::= ("\\u000a")', 't_WORD ::= (([\\"a-z])+ " ")', 't___ANON_0 ::= "say "']
    spelled = ebnf(grammar, json_string=True)
    assert 't_WORD ::= ((([a-z] | "\\\\\\""))+ " ")' in spelled.splitlines()  # `"` is written `\"`
    assert 't_LF ::= ("\\\\n")' in spelled.splitlines()


@pytest.mark.parametrize(("syntax", "definition"), [
    ("regex", "a(?=b)"), ("regex", r"(a)\1"), ("regex", "[a-z]+"[:3]), ("lark", "start: A\nA: /x/i"),
    ("lark", 'start: "a"\n%ignore " "'), ("lark", "rule_without_start: A\nA: \"a\""), ("lark", "start: ("),
    ("cfg", "anything")])
def test_what_the_ebnf_cannot_say_is_refused(syntax, definition):
    with pytest.raises(UnsupportedGrammar):
        ebnf(ToolGrammar(syntax, definition), json_string=True)


class _Qwen3:
    think_open, think_close, call_open, call_close = THINK, END_THINK, TOOL_CALL, END_TOOL_CALL


def _call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


@pytest.mark.vllm
def test_vllms_engine_takes_a_call_exactly_when_its_patch_parses(qwen_tokenizer_dir):
    tools = [_tool("lark", GRAMMAR), Tool(name="exec_command", parameters=SHELL["parameters"])]
    tag = structured_outputs(OutputConstraint(), tools, calls="hermes", markers=_Qwen3, starts_in_reasoning=False)
    patches = [PATCH, PATCH + "\n", *NOT_PATCHES]
    texts = {"Just text.": True,
             "Let me look." + _call("exec_command", '{"cmd": "ls -la"}'): True,
             _call("exec_command", "not even json"): True,  # a function's arguments stay free
             _call("apply_patch", json.dumps({"input": {"patch": PATCH}})): False,  # JSON-wrapped input
             _call("apply_patch", '{"input": "' + PATCH + '"}'): False,  # not escaped: not a JSON string
             _call("apply_patch", '{"input":"' + json_wrapped(PATCH) + '"}'): False}  # not the gateway's spelling
    texts |= {_call("apply_patch", '{"input": "' + json_wrapped(patch) + '"}'): parses(patch) for patch in patches}
    assert [parses(patch) for patch in patches] == [True, True, False, False, False, False]
    [got] = _accepts(qwen_tokenizer_dir, 151936, [IM_END], [(tag, [text + "<|im_end|>" for text in texts])])
    assert dict(zip(texts, got)) == texts


@pytest.mark.vllm
def test_a_regex_tool_is_enforced_the_same_way(qwen_tokenizer_dir):
    tag = structured_outputs(OutputConstraint(tool_choice="required"), [_tool("regex", r"v\d+\.\d+ \"\w+\"", "tag")],
                             calls="hermes", markers=_Qwen3, starts_in_reasoning=False)
    texts = {_call("tag", '{"input": "v1.25 \\"rc\\""}'): True, _call("tag", '{"input": "v1 \\"rc\\""}'): False,
             "No call.": False}
    [got] = _accepts(qwen_tokenizer_dir, 151936, [IM_END], [(tag, [text + "<|im_end|>" for text in texts])])
    assert dict(zip(texts, got)) == texts


@pytest.fixture(scope="module")
def stack(qwen_tokenizer_dir):
    with fake_stack(qwen_tokenizer_dir, served_model_name="m") as stack:
        yield stack


def _sent_tag(stack, tokenizer, tools: list, **fields) -> dict | None:
    stack.fake.reset()
    stack.fake.queue(Script(ids(tokenizer, "Done.") + [IM_END]))
    response = httpx.post(stack.url + "/v1/responses", json={"model": "m", "input": "edit", "tools": tools, **fields},
                          timeout=30)
    assert response.status_code == 200, response.text
    structured = stack.fake.bodies("/inference/v1/generate")[-1]["sampling_params"].get("structured_outputs")
    return json.loads(structured["structural_tag"])["format"] if structured else None


def test_codexs_apply_patch_is_enforced_with_tool_choice_auto(stack, tokenizer):
    tag = _sent_tag(stack, tokenizer, [SHELL, APPLY_PATCH_TOOL])
    assert tag["type"] == "or"  # optional thinking first, then text until a triggered call
    triggered = tag["elements"][1]
    assert triggered["type"] == "token_triggered_tags" and triggered["trigger_tokens"] == [TOOL_CALL]
    [call] = triggered["tags"]
    shell, patch = call["content"]["elements"]
    assert shell == {"type": "sequence", "elements": [
        {"type": "const_string", "value": '\n{"name": "exec_command", "arguments": '},
        {"type": "regex", "pattern": r"[\s\S]*"}]}
    assert patch == {"type": "sequence", "elements": [
        {"type": "const_string", "value": '\n{"name": "apply_patch", "arguments": {"input": "'},
        {"type": "grammar", "grammar": ebnf(ToolGrammar("lark", GRAMMAR), json_string=True)},
        {"type": "const_string", "value": '"}}\n'}]}
    assert _sent_tag(stack, tokenizer, [SHELL]) is None  # functions alone: nothing to enforce


FORCED = {"tool_choice": {"type": "custom", "name": "apply_patch"}}


def test_a_forced_custom_call_is_its_grammar(stack, tokenizer):
    tag = _sent_tag(stack, tokenizer, [SHELL, APPLY_PATCH_TOOL], **FORCED)
    call = tag["elements"][1]["elements"][0]  # after the optional thinking, a call first (more may follow)
    assert call["type"] == "tag" and call["content"]["elements"][1]["type"] == "grammar"


def test_no_tool_grammars_offers_the_tool_unconstrained(qwen_tokenizer_dir, tokenizer):
    with fake_stack(qwen_tokenizer_dir, served_model_name="m", tool_grammars=False) as stack:
        assert _sent_tag(stack, tokenizer, [SHELL, APPLY_PATCH_TOOL]) is None
        # forced, the call is still JSON of its one string argument, whatever the string
        tag = _sent_tag(stack, tokenizer, [SHELL, APPLY_PATCH_TOOL], **FORCED)
        assert tag["elements"][1]["elements"][0]["content"]["elements"][1] == {
            "type": "json_schema", "max_whitespace_cnt": 32, "json_schema": {
                "type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}}


def test_with_thinking_off_the_tag_offers_no_thinking(stack, tokenizer):
    """The template closed the thinking in the prompt: the output starts with the text or the call."""
    tag = _sent_tag(stack, tokenizer, [SHELL, APPLY_PATCH_TOOL], reasoning={"effort": "none"}, **FORCED)
    assert tag["type"] == "sequence" and tag["elements"][0]["type"] == "tag"  # the call at once
