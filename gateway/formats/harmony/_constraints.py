"""Forced and structured output for gpt-oss, as vLLM structured outputs over harmony's tokens.

vLLM's own server constrains gpt-oss only once its reasoning parser sees the final channel
open (the grammar waits for the end of reasoning); the gateway sends token ids to a stock
replica that runs no reasoning parser, so the whole assistant turn is spelled out in one
structural tag instead, its markers as their token ids (`<|channel|>`, `<|message|>`, … are
single special tokens). The generation prompt ends with `<|start|>assistant`, so:

- any number of analysis messages first, free inside:
  `<|channel|>analysis<|message|>…<|end|><|start|>assistant`;
- a forced call (`tool_choice` required or named, `allowed_tools` with mode required) is a
  commentary message to one allowed function, written as gpt-oss writes it:
  `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>` + JSON of the tool's
  parameter schema; `<|call|>` (a stop token) then ends the generation;
- a JSON answer (`json_schema` / `json_object`) is the final message
  `<|channel|>final<|message|>` + JSON of the schema, or a call when tools are offered and
  not forced; `<|return|>` then ends it;
- `allowed_tools` with mode auto: a free final message or a call of an allowed tool.

A custom tool's call (Codex's apply_patch) is `{"input": "…"}` whose string matches the tool's
grammar (gateway/formats/_tool_grammar.py), whether the call is forced or not: with
`tool_choice: auto` and custom tools offered, the turn is any number of analysis and commentary
preambles (`<|channel|>commentary<|message|>…<|end|>`, free inside), then a free final message or
a call of an offered tool — a custom tool's input by its grammar, a function's arguments free (only
its name must be an offered one), as the HF families' triggered tags leave them.

A harmony call ends its generation (`<|call|>` is a stop token), so one generation makes at
most one call: `parallel_tool_calls: false` and `max_tool_calls` need no constraint.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gateway.core.conversation import Tool
from gateway.core.sampling import OutputConstraint
from gateway.formats.hf.constraints import CUSTOM_INPUT, MAX_WHITESPACE, allowed_tools, custom_grammar

__all__ = ["HarmonyTokens", "structured_outputs"]

Format = dict[str, Any]


class HarmonyTokens:
    """The special tokens a harmony turn is spelled with, by id."""

    def __init__(self, ids: dict[str, int]) -> None:
        self.start, self.end, self.channel = ids["<|start|>"], ids["<|end|>"], ids["<|channel|>"]
        self.message, self.constrain = ids["<|message|>"], ids["<|constrain|>"]
        self.stops = [ids["<|return|>"], ids["<|call|>"]]


def structured_outputs(constraint: OutputConstraint, tools: Sequence[Tool], tokens: HarmonyTokens
                       ) -> dict[str, Any]:
    forced = constraint.tool_choice != "auto"
    allowed = allowed_tools(constraint, tools) if forced or constraint.allowed_tools is not None or tools else []
    call = _or([_call(tool, tokens) for tool in allowed]) if allowed else None
    if call is not None and forced:
        body = call
    elif constraint.answer_schema is not None:
        answer = _final(tokens, _json(constraint.answer_schema))
        body = _or([answer, call]) if call is not None else answer
    elif call is not None and constraint.allowed_tools is not None:
        body = _or([_final(tokens, _free(tokens)), call])
    elif any(tool.grammar is not None for tool in allowed):  # auto: only the custom tools' inputs
        calls = _or([_call(tool, tokens, free=True) for tool in allowed])
        before = [_message(tokens, "analysis"), _message(tokens, "commentary")]
        return _tag([{"type": "repeat", "min": 0, "max": -1, "content": _or(before)},
                     _or([_final(tokens, _free(tokens)), calls])])
    else:
        return {}  # one call per generation at most already: nothing else asked for
    return _tag([{"type": "repeat", "min": 0, "max": -1, "content": _message(tokens, "analysis")}, body])


def _tag(elements: list[Format]) -> dict[str, Any]:
    whole = {"type": "sequence", "elements": elements}
    return {"structural_tag": json.dumps({"type": "structural_tag", "format": whole})}


def _message(tokens: HarmonyTokens, channel: str) -> Format:
    """A whole message on `channel` with no recipient, free inside, and the next one's start."""
    return {"type": "sequence", "elements": [
        _token(tokens.channel), _const(channel), _token(tokens.message), _free(tokens), _token(tokens.end),
        _token(tokens.start), _const("assistant")]}


def _free(tokens: HarmonyTokens) -> Format:
    return {"type": "any_tokens", "exclude_tokens": [tokens.end, *tokens.stops]}


def _call(tool: Tool, tokens: HarmonyTokens, *, free: bool = False) -> Format:
    """A call of `tool`: a custom tool's input by its grammar; a function's arguments by its schema,
    or (`free`) any tokens up to `<|call|>`."""
    grammar = custom_grammar(tool, json_string=True)
    if grammar is not None:  # a custom tool's input, as its grammar says
        arguments = {"type": "sequence", "elements": [_const(f'{{"{CUSTOM_INPUT}": "'), grammar, _const('"}')]}
    else:
        arguments = _free(tokens) if free else _json(tool.parameters or {"type": "object"})
    return {"type": "sequence", "elements": [
        _token(tokens.channel), _const(f"commentary to=functions.{tool.name} "), _token(tokens.constrain),
        _const("json"), _token(tokens.message), arguments]}


def _final(tokens: HarmonyTokens, content: Format) -> Format:
    return {"type": "sequence", "elements": [_token(tokens.channel), _const("final"), _token(tokens.message),
                                             content]}


def _or(elements: list[Format]) -> Format:
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}


def _json(schema: dict[str, Any]) -> Format:
    return {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": MAX_WHITESPACE}


def _token(token_id: int) -> Format:
    return {"type": "token", "token": token_id}


def _const(text: str) -> Format:
    return {"type": "const_string", "value": text}
