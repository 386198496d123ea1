"""Pythonic tool calls: Llama 4's (`llama4_pythonic`) and Llama 3.2's (`pythonic`) as the whole answer,
Olmo 3's (`olmo3`) and LFM2's (`lfm2`) between call markers.

Llama 4 (with vLLM's pythonic template) answers a call with nothing but

    [read_file(path="a.py"), shell(command=["ls"], timeout_ms=5)]

then `<|eot|>`, optionally inside `<|python_start|>`. There is no marker to switch on, so, as with
Llama 3's JSON calls (`llama3_json`; `held_calls` reads both), an output is held as calls
when it starts with `[` and read whole at the end. It is calls when it is a Python list of calls
with keyword arguments whose values are literals, as vLLM's `llama4_pythonic` parser reads it
(`ast`, `vllm/tool_parsers/utils.py`'s `handle_single_tool`): the arguments become the JSON object
of those values; `true`, `false` and `null` are read as JSON's. Anything else is text, as written.

Olmo 3 writes `<function_calls>\nf(a='x')\ng(b=1)\n</function_calls>` (one call a line) and LFM2
`<|tool_call_start|>[f(a='x'), g(b=1)]<|tool_call_end|>`, both after any text and reasoning; their
markers are single added tokens, so the parser is `hf.parser`'s with the body read as pythonic calls
(a body that is not all calls is text, with its markers, as a hermes body that is not JSON).

Rendering: the templates write each argument from the arguments as a dict (Llama 4 as `KEY="VALUE"`
with Python's `%s` of the value, Olmo 3 and LFM2 strings quoted and the rest as JSON or Python), every
call of a turn in one block; LFM2's template reads a turn's reasoning from `thinking`.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable
from typing import Any

from gateway.core.conversation import Tool
from gateway.formats._family import Family, ParserFactory, Turns
from gateway.formats._held_calls import HeldCallsParser
from gateway.formats._shared import with_argument_dicts
from gateway.formats.hf.parser import HermesOutputParser, Markup

__all__ = ["LFM2", "LLAMA4", "LLAMA32", "OLMO3", "parse_pythonic"]

PYTHON_START = "<|python_start|>"
TEMPLATE_MARKER = "[func_name1(param1=value1, param2=value2), func_name2(...)]"
LLAMA32_MARKER = "[func_name1(params_name1=params_value1"  # vLLM's Llama 3.2 pythonic template
_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


class PythonicParser(HeldCallsParser):
    """The held-output parser reading a Python list of calls."""

    opener = b"["

    def read_calls(self, text: str) -> list[tuple[str, str]] | None:
        return parse_pythonic(text, self._names)


class TaggedPythonicParser(HermesOutputParser):
    """`hf.parser`'s parser whose call body (between the family's markers) is pythonic calls."""

    def __init__(self, token_bytes: list[bytes], markup: Markup, stop_ids: frozenset[int],
                 starts_in_reasoning: bool = False, tools: Iterable[Tool] = ()) -> None:
        self._names = frozenset(tool.name for tool in tools)
        super().__init__(token_bytes, markup, stop_ids, starts_in_reasoning)

    def _json_call(self, body: bytes) -> None:
        text = body.decode("utf-8", errors="replace").strip()
        listed = text if text.startswith("[") else "[" + ", ".join(filter(None, map(str.strip, text.splitlines()))) + "]"
        calls = parse_pythonic(listed, self._names)
        if calls is None:
            super()._json_call(body)  # not a call: text, markers and all
        else:
            self._whole_calls(calls)


def parse_pythonic(text: str, names: frozenset[str] = frozenset()) -> list[tuple[str, str]] | None:
    """(name, arguments JSON) per call of a `[f(a=1), g()]` answer, or None when it is not all calls."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(tree, ast.List) or not tree.elts:
        return None
    calls = []
    for node in tree.elts:
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
            return None
        if names and node.func.id not in names:
            return None
        try:
            arguments = {keyword.arg: _literal(keyword.value) for keyword in node.keywords}
        except ValueError:
            return None
        if None in arguments:
            return None  # a **kwargs
        calls.append((node.func.id, json.dumps(arguments, ensure_ascii=False)))
    return calls


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(element) for element in node.elts]
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise ValueError("a ** in a dict")
        return {_literal(key): _literal(value) for key, value in zip(node.keys, node.values)}  # type: ignore[arg-type]
    value = ast.literal_eval(node)  # ValueError when it is not a literal
    return value if isinstance(value, str | int | float | bool | type(None)) else _not_json(value)


def _not_json(value: Any) -> Any:
    raise ValueError(f"not a JSON value: {value!r}")


def lfm2_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`with_argument_dicts`, with a turn's reasoning under `thinking`, where LFM2's template reads it."""
    return [{**{k: v for k, v in m.items() if k != "reasoning_content"}, "thinking": m["reasoning_content"]}
            if "reasoning_content" in m else m for m in with_argument_dicts(messages)]


def _parsers(vocab: dict[str, int]) -> ParserFactory:
    return lambda shared, starts, tools: PythonicParser(shared.token_bytes, shared.markup, shared.stop_ids, tools)


def _tagged_parsers(vocab: dict[str, int]) -> ParserFactory:
    return lambda shared, starts, tools: TaggedPythonicParser(shared.token_bytes, shared.markup, shared.stop_ids,
                                                              starts, tools)


LLAMA4 = Family(
    name="llama4_pythonic", tool_parsers=("llama4_pythonic",),
    detect=lambda template: TEMPLATE_MARKER in template and "<|header_start|>" in template,
    markers={"call_open": PYTHON_START, "call_close": None},
    turns=Turns(stops=("<|eot|>", "<|eom|>", "<|end_of_text|>"), terminators=("<|eot|>",)),
    prepare=with_argument_dicts, parsers=_parsers, image="<|image|>")
OLMO3 = Family(
    name="olmo3", tool_parsers=("olmo3",), reasoning_parsers=("olmo3",),
    detect=lambda template: "<function_calls>" in template,
    markers={"call_open": "<function_calls>", "call_close": "</function_calls>"},
    needs=("<function_calls>", "</function_calls>"), prepare=with_argument_dicts, parsers=_tagged_parsers)
LFM2 = Family(
    name="lfm2", tool_parsers=("lfm2",),
    detect=lambda template: "<|tool_call_start|>" in template,
    markers={"call_open": "<|tool_call_start|>", "call_close": "<|tool_call_end|>"},
    needs=("<|tool_call_start|>", "<|tool_call_end|>"), prepare=lfm2_messages, parsers=_tagged_parsers,
    image="<image>")
LLAMA32 = Family(
    name="pythonic", tool_parsers=("pythonic",), detect=lambda template: LLAMA32_MARKER in template,
    markers={"call_open": "<|python_tag|>", "call_close": None},
    turns=Turns(stops=("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"), terminators=("<|eot_id|>",)),
    prepare=with_argument_dicts, parsers=_parsers)
