"""Llama 3.1 / 3.2 / 3.3 JSON tool calls (`llama3_json`): the output parser and the render-side shapes.

Llama writes a call as the whole of its answer, in JSON, optionally after `<|python_tag|>`:

    {"name": "read_file", "parameters": {"path": "a.py"}}

several separated by `;`, then `<|eot_id|>` (or `<|eom_id|>`). There is no marker token to switch on
(`<|python_tag|>` is optional), so, as vLLM's `llama3_json` parser decides, an output is calls when it
starts with `{` (after whitespace) or `<|python_tag|>`, and text otherwise. Such an output is held
until the end and read whole: JSON objects separated by `;`, each with a `name` (one of the request's
tools when it has tools) and `parameters` (or `arguments`) an object; the arguments keep the text the
model wrote when they are the object's last member, as `hf.parser` keeps hermes arguments. Anything
else is text, as written (a JSON answer, a call cut short by the length limit). Text outputs stream as
they come.

Llama 4 with vLLM's JSON template (`llama4_json`) writes the same calls in its own turns
(`<|header_start|>…<|header_end|>`, `<|eot|>`); its template writes a turn's calls one after the
other in one message, from the arguments as dicts.

Rendering: vLLM's template writes a call as `{"name": …, "parameters": ` + the arguments `| tojson`,
one call per assistant message, so calls reach it with their arguments as dicts and a turn of
parallel calls as one message per call (the exact-token splice keeps the model's own single turn).
"""

from __future__ import annotations

import json
from typing import Any

from gateway.formats._family import Family, ParserFactory, Turns
from gateway.formats._held_calls import HeldCallsParser
from gateway.formats._shared import argument_dict, is_valid_name, with_argument_dicts
from gateway.formats.hf.parser import written_arguments

__all__ = ["FAMILY", "LLAMA4"]

PYTHON_TAG = "<|python_tag|>"
TEMPLATE_MARKER = '"parameters": '  # vLLM's llama3.1 JSON template writes calls with it


class Llama3JsonParser(HeldCallsParser):
    """The held-output parser reading `{…}; {…}` calls (`markup.call_open`: `<|python_tag|>`)."""

    def read_calls(self, text: str) -> list[tuple[str, str]] | None:
        return parse_calls(text, self._names)


def parse_calls(text: str, names: frozenset[str] = frozenset()) -> list[tuple[str, str]] | None:
    """(name, arguments JSON) per call of a `{…}; {…}` answer, or None when it is not all calls."""
    decoder = json.JSONDecoder()
    calls: list[tuple[str, str]] = []
    position, end = 0, len(text)
    while True:
        while position < end and text[position] in " \t\r\n":
            position += 1
        if position == end:
            return calls or None
        try:
            call, stop = decoder.raw_decode(text, position)
        except (ValueError, RecursionError):
            return None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return None
        key = "parameters" if "parameters" in call else "arguments"
        arguments = call.get(key, {})
        if not isinstance(arguments, dict) or not is_valid_name(call["name"]) or (names and call["name"] not in names):
            return None
        calls.append((call["name"], written_arguments(text[position:stop], key, arguments)))
        position = stop
        while position < end and text[position] in " \t\r\n":
            position += 1
        if position < end:
            if text[position] != ";":
                return None
            position += 1


# Rendering ------------------------------------------------------------------------------------

def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`hf_messages`' messages as vLLM's llama3.1 JSON template takes them: arguments as dicts, and
    one assistant message per call (the template refuses more than one)."""
    shaped: list[dict[str, Any]] = []
    for message in messages:
        calls = message.get("tool_calls")
        if not calls:
            shaped.append(message)
            continue
        for call in calls:
            function = {**call["function"], "arguments": argument_dict(call["function"]["arguments"])}
            shaped.append({**message, "tool_calls": [{**call, "function": function}]})
    return shaped


def _parsers(vocab: dict[str, int]) -> ParserFactory:
    return lambda shared, starts, tools: Llama3JsonParser(shared.token_bytes, shared.markup, shared.stop_ids, tools)


# Calls have no closing marker; `<|python_tag|>` may open them.
FAMILY = Family(
    name="llama3_json", tool_parsers=("llama3_json",),
    detect=lambda template: TEMPLATE_MARKER in template and "<|eot_id|>" in template,
    markers={"call_open": PYTHON_TAG, "call_close": None}, prepare=template_messages, parsers=_parsers)
LLAMA4 = Family(
    name="llama4_json", tool_parsers=("llama4_json",),
    detect=lambda template: TEMPLATE_MARKER in template and "<|header_start|>" in template,
    markers={"call_open": PYTHON_TAG, "call_close": None},
    turns=Turns(stops=("<|eot|>", "<|eom|>", "<|end_of_text|>"), terminators=("<|eot|>", "<|eom|>")),
    prepare=with_argument_dicts, parsers=_parsers, image="<|image|>")
