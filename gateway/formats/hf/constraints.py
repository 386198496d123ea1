"""Forced and structured output for HF chat-template models, as vLLM structured outputs.

The constraint is a structural tag (xgrammar's, which vLLM's `structured_outputs.structural_tag`
takes on both token endpoints) spelled in the model's own output syntax, its markers as their
token ids (`<think>`, `<tool_call>` … are single added tokens; spelled out as text they would
be other tokens, which neither the model nor the gateway's parser reads as markup), so the
constrained tokens are what the model would have written and stay on-policy:

- an optional `<think>…</think>\\n\\n` first (or, when the prompt leaves `<think>` open, the
  rest of the thinking up to `</think>`), free text inside; none when the request turned
  thinking off (the template closed it in the prompt);
- a forced call (`tool_choice` required or named) is one or more calls of the allowed tools,
  Qwen3's `<tool_call>` `\\n{"name": "NAME", "arguments": ` + JSON of the tool's parameter
  schema + `}\\n` `</tool_call>`, or Qwen3.6's `<tool_call>` `\\n<function=NAME>\\n` + the
  parameters as `<parameter=KEY>\\nVALUE\\n</parameter>\\n`, typed by the tool's schema, +
  `</function>\\n` `</tool_call>`, joined by a newline as the template joins them;
  `parallel_tool_calls: false` allows one, `max_tool_calls` that many;
- with `tool_choice: auto` and allowed tools or one call at most, text is free until the
  `<tool_call>` token, which then opens only an allowed call;
- a JSON answer (`json_schema` / `json_object`) is JSON of that schema, or calls when tools
  are offered and not forced;
- a custom tool's call (Codex's freeform apply_patch) is its one `input` string matching the
  tool's Lark or regex grammar (gateway/formats/_tool_grammar.py), inside the JSON string of
  `{"input": "…"}` or as Qwen3.6's raw `<parameter=input>` text; when nothing else is asked for
  (`tool_choice: auto`), calls are triggered as above, a custom tool's input constrained and a
  function's arguments left free (only its name must be an offered one).

After the grammar ends only the stop tokens can follow, so generation stops after the last
allowed call instead of calls being dropped afterwards. JSON may hold at most
`MAX_WHITESPACE` whitespace characters in a row (pretty-printing fits; a model that would pad
forever cannot); XML parameters one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from gateway.core.conversation import Tool
from gateway.core.errors import APIError
from gateway.core.sampling import OutputConstraint
from gateway.formats._tool_grammar import UnsupportedGrammar, ebnf

__all__ = ["CUSTOM_INPUT", "MAX_WHITESPACE", "allowed_tools", "custom_grammar", "structured_outputs"]

log = logging.getLogger(__name__)

MAX_WHITESPACE = 32
CUSTOM_INPUT = "input"  # the one argument a custom tool is offered with (gateway/adapters/_codex_tools.py)
# A string parameter's text: anything but `</` (which would close the parameter), not ending
# in a newline (the parser takes the last one as markup's).
_XML_TEXT = r"([^<\n]|<[^/]|\n[^<])*"
_XML_SCALARS = {"integer": r"-?[0-9]+", "number": r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?",
                "boolean": "true|false", "null": "null"}
Format = dict[str, Any]
# Any text, matched by bytes (a token may straddle it and the text before; any_tokens would refuse
# that token): the call's end token still ends it, special tokens being no text.
_ANY_TEXT = {"type": "regex", "pattern": r"[\s\S]*"}


class Markers(Protocol):
    think_open: int | None
    think_close: int | None
    call_open: int | None
    call_close: int | None


def structured_outputs(constraint: OutputConstraint, tools: Sequence[Tool], *, calls: str, markers: Markers,
                       starts_in_reasoning: bool, thinking: bool = True) -> dict[str, Any]:
    """vLLM's `structured_outputs` for `constraint`. `calls`: "hermes" | "xml" | "none"."""
    allowed = allowed_tools(constraint, tools)
    forced = constraint.tool_choice != "auto"
    has_calls = calls != "none" and markers.call_open is not None and markers.call_close is not None
    if not has_calls and (forced or constraint.allowed_tools is not None):
        raise APIError("The requested output constraint cannot be enforced: this model format has no tool "
                       "calls to force.", status=400, param="tool_choice", code="unsupported_value")
    call = _call(allowed, calls, markers, free=not constraint.active) if has_calls and allowed else None
    limit = constraint.max_calls
    body: Format | None = None
    if call is not None and forced:
        body = _calls(call, limit)
    elif constraint.answer_schema is not None:
        answer = _json(constraint.answer_schema)
        body = {"type": "or", "elements": [answer, _calls(call, limit)]} if call is not None else answer
    elif call is not None:
        tag = call if limit is None or limit == 1 else _run(call, limit - 1)  # text, then up to `limit` calls
        body = {"type": "token_triggered_tags", "trigger_tokens": [markers.call_open], "tags": [tag],
                "at_least_one": False, "stop_after_first": limit is not None}
    if body is None:
        return {}
    if starts_in_reasoning and markers.think_close is None:
        # Reasoning whose end is no single token (Kimi-K3's `<|close|>think<|sep|>` tag): a grammar from the first
        # token would force the answer into the reasoning.
        raise APIError("The requested output constraint cannot be enforced while this model reasons: turn "
                       "reasoning off (reasoning effort \"none\") to constrain its answer.", status=400,
                       code="unsupported_value")
    if markers.think_close is not None and starts_in_reasoning:
        body = {"type": "sequence", "elements": [_thinking(None, markers.think_close), body]}
    elif thinking and markers.think_open is not None and markers.think_close is not None:
        thought = {"type": "sequence", "elements": [_thinking(markers.think_open, markers.think_close), body]}
        body = {"type": "or", "elements": [thought, body]}
    return {"structural_tag": json.dumps({"type": "structural_tag", "format": body})}


def allowed_tools(constraint: OutputConstraint, tools: Sequence[Tool]) -> list[Tool]:
    """The tools a call may name; 400 for a forced name that is not offered, or a forced call
    with no tools."""
    names = {tool.name for tool in tools}
    wanted: Sequence[str] | None = constraint.allowed_tools
    if constraint.tool_choice not in ("auto", "required"):
        wanted = [constraint.tool_choice]
    for name in wanted or ():
        if name not in names:
            raise APIError(f"Tool choice '{name}' is not one of the request's tools.", status=400,
                           param="tool_choice", code="invalid_value")
    if constraint.tool_choice != "auto" and not tools:
        raise APIError("'tool_choice' forces a call, but the request offers no tools.", status=400,
                       param="tool_choice", code="invalid_value")
    return [tool for tool in tools if wanted is None or tool.name in wanted]


def _call(tools: Sequence[Tool], calls: str, markers: Markers, *, free: bool) -> Format:
    """One call of any of `tools`: `<tool_call>` (a token) + body + `</tool_call>` (a token).
    `free`: only custom tools' grammars are asked for; a function's arguments stay unconstrained."""
    bodies = [_body(tool, calls, free=free) for tool in tools]
    content = bodies[0] if len(bodies) == 1 else {"type": "or", "elements": bodies}
    return {"type": "tag", "begin": {"type": "token", "token": markers.call_open}, "content": content,
            "end": {"type": "token", "token": markers.call_close}}


def _body(tool: Tool, calls: str, *, free: bool) -> Format:
    grammar = custom_grammar(tool, json_string=calls != "xml")
    if grammar is not None:
        return _custom_body(tool.name, grammar, calls)
    schema = tool.parameters or {"type": "object"}
    if free:
        head = f"\n<function={tool.name}>\n" if calls == "xml" else f'\n{{"name": {json.dumps(tool.name)}, "arguments": '
        return {"type": "sequence", "elements": [_const(head), _ANY_TEXT]}
    if calls == "xml":
        return {"type": "sequence", "elements": [
            _const(f"\n<function={tool.name}>\n"), *_xml_parameters(schema), _const("</function>\n")]}
    return {"type": "sequence", "elements": [
        _const(f'\n{{"name": {json.dumps(tool.name)}, "arguments": '), _json(schema), _const("}\n")]}


def custom_grammar(tool: Tool, *, json_string: bool) -> Format | None:
    """A custom tool's grammar as an element (None: a function, or a grammar the engine cannot take)."""
    if tool.grammar is None:
        return None
    try:
        return {"type": "grammar", "grammar": ebnf(tool.grammar, json_string=json_string)}
    except UnsupportedGrammar as exc:
        log.warning("tool %r: its %s grammar is not enforced (%s)", tool.name, tool.grammar.syntax, exc)
        return None


def _custom_body(name: str, grammar: Format, calls: str) -> Format:
    """The one `input` string of a custom tool, spelled as the gateway renders the call back
    (codex_tools.custom_arguments): a JSON string, or Qwen3.6's raw parameter text."""
    if calls == "xml":
        head, tail = f"\n<function={name}>\n<parameter={CUSTOM_INPUT}>\n", "\n</parameter>\n</function>\n"
    else:
        head, tail = f'\n{{"name": {json.dumps(name)}, "arguments": {{"{CUSTOM_INPUT}": "', '"}}\n'
    return {"type": "sequence", "elements": [_const(head), grammar, _const(tail)]}


def _xml_parameters(schema: dict[str, Any]) -> list[Format]:
    """Qwen3.6's `<parameter=KEY>\nVALUE\n</parameter>\n` for each property, in the schema's
    order, the required ones always: values exactly as the gateway's parser (_xml_calls.py) reads
    them back, typed by the property's schema."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    out: list[Format] = []
    for key, spec in properties.items():
        parameter = {"type": "sequence", "elements": [
            _const(f"<parameter={key}>\n"), _xml_value(spec if isinstance(spec, dict) else {}),
            _const("\n</parameter>\n")]}
        out.append(parameter if key in required else {"type": "optional", "content": parameter})
    return out


def _xml_value(spec: dict[str, Any]) -> Format:
    if isinstance(spec.get("enum"), list) and spec["enum"]:
        return {"type": "or", "elements": [_const(v if isinstance(v, str) else json.dumps(v)) for v in spec["enum"]]}
    kind = spec.get("type")
    if kind == "string":
        return {"type": "regex", "pattern": _XML_TEXT}
    if kind in _XML_SCALARS:
        return {"type": "regex", "pattern": _XML_SCALARS[kind]}
    return _json(spec)


def _calls(call: Format, limit: int | None) -> Format:
    """`call`, then up to `limit` - 1 more calls (None: any number), each after a newline."""
    return call if limit == 1 else {"type": "sequence", "elements": [call, _more(call, -1 if limit is None else limit - 1)]}


def _run(call: Format, most: int) -> Format:
    """One triggered tag holding `call` and up to `most` more after it, each closed, a newline,
    reopened: one tag, so nothing follows the triggered tags (which would keep text from ending)."""
    between = {"type": "sequence", "elements": [call["end"], _const("\n"), call["begin"], call["content"]]}
    return {**call, "content": {"type": "sequence", "elements": [
        call["content"], {"type": "repeat", "min": 0, "max": most, "content": between}]}}


def _more(call: Format, most: int) -> Format:
    """Up to `most` more calls (-1: any number), each after a newline."""
    return {"type": "repeat", "min": 0, "max": most, "content": {"type": "sequence", "elements": [_const("\n"), call]}}


def _thinking(open_: int | None, close: int) -> Format:
    """[`<think>`] any tokens but `</think>`, `</think>`, a blank line. (Any tokens rather than
    xgrammar's any_text, which keeps a sequence after it from ending.)"""
    elements: list[Format] = [{"type": "token", "token": open_}] if open_ is not None else []
    return {"type": "sequence", "elements": [
        *elements, {"type": "any_tokens", "exclude_tokens": [close]}, {"type": "token", "token": close},
        _const("\n\n")]}


def _json(schema: dict[str, Any]) -> Format:
    return {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": MAX_WHITESPACE}


def _const(text: str) -> Format:
    return {"type": "const_string", "value": text}
