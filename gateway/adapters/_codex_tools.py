"""Codex tool shapes, flattened into plain functions the served model can call, and back.

- `{"type":"namespace","name":NS,"tools":[…]}`: each inner function is offered as `NS__name`;
  a call comes back as a `function_call` with `name` and `namespace` as Codex sent them.
- `{"type":"custom",…}` (freeform, e.g. apply_patch with a grammar): offered as a function with
  one string argument `input`; a call comes back as a `custom_tool_call` carrying that string.
  A Lark or regex grammar goes in the description and is enforced on the string as the model
  writes it (gateway/formats/_tool_grammar.py).
- Other hosted tools (`web_search`, `tool_search`, `local_shell` …) are not offered.

The canonical history keeps the model-visible names and argument JSON, so an echoed
Codex history renders exactly as the model wrote it.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from gateway.adapters._tool_schema import (
    CustomTool,
    FunctionSpec,
    FunctionTool,
    GrammarFormat,
    NamespaceTool,
    ResponsesTool,
)
from gateway.core.conversation import Tool, ToolGrammar
from gateway.formats.hf.constraints import CUSTOM_INPUT

__all__ = ["LOCAL_SHELL", "CustomInputStream", "Route", "custom_arguments", "custom_input", "flat_name", "function_tool", "offered_tools",
           "routes"]

log = logging.getLogger(__name__)

NAMESPACE_SEPARATOR = "__"
CUSTOM_ARGUMENT = CUSTOM_INPUT
LOCAL_SHELL = "local_shell"  # the function name a `local_shell_call` history item renders as


@dataclass(frozen=True, slots=True)
class Route:
    """What a model-visible function name is on the wire."""

    name: str
    namespace: str | None = None
    custom: bool = False


def flat_name(namespace: str | None, name: str) -> str:
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


def offered_tools(tool: ResponsesTool) -> list[Tool]:
    """The functions one request tool becomes (none for hosted tools; an MCP server's are listed
    later, gateway/adapters/responses/_mcp_tools.py)."""
    if isinstance(tool, FunctionTool):
        return [function_tool(tool)]
    if isinstance(tool, NamespaceTool):
        tools = [offered for inner in tool.tools for offered in offered_tools(inner)]
        for offered in tools:
            offered.name = flat_name(tool.name, offered.name)
        return tools
    if isinstance(tool, CustomTool):
        return [custom_tool(tool)]
    log.debug("not offering a tool of type %r", tool.type)
    return []


def function_tool(spec: FunctionSpec) -> Tool:
    return Tool(name=spec.name, description=spec.description or "",
                parameters=spec.parameters or {"type": "object", "properties": {}}, strict=spec.strict)


def custom_tool(tool: CustomTool) -> Tool:
    """A freeform tool as a function of one string; its grammar goes in the description,
    the only place the model can read it, and is enforced as the model writes the string."""
    description, grammar = tool.description or "", None
    if isinstance(tool.format, GrammarFormat):
        description += (f"\n\nThe `{CUSTOM_ARGUMENT}` argument must match this {tool.format.syntax} "
                        f"grammar:\n{tool.format.definition}")
        grammar = ToolGrammar(tool.format.syntax, tool.format.definition)
    parameters = {"type": "object", "properties": {CUSTOM_ARGUMENT: {"type": "string"}},
                  "required": [CUSTOM_ARGUMENT]}
    return Tool(name=tool.name, description=description, parameters=parameters, grammar=grammar)


def routes(raw_tools: Any) -> dict[str, Route]:
    """Model-visible names of namespaced and custom tools (plain functions need no route).
    Reads tools `parse_request` already validated, so it skips anything malformed."""
    found: dict[str, Route] = {}
    for raw in raw_tools if isinstance(raw_tools, list) else []:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            continue
        if raw.get("type") == "custom":
            found[raw["name"]] = Route(raw["name"], custom=True)
        elif raw.get("type") == "namespace" and isinstance(raw.get("tools"), list):
            for sub in raw["tools"]:
                if isinstance(sub, dict) and isinstance(sub.get("name"), str):
                    found[flat_name(raw["name"], sub["name"])] = Route(sub["name"], namespace=raw["name"])
    return found


def custom_arguments(text: str) -> str:
    """A custom call's input as the function arguments the model writes for it: the JSON
    spelling of json.dumps, which is how Qwen and harmony models write arguments."""
    return json.dumps({CUSTOM_ARGUMENT: text}, ensure_ascii=False)


def custom_input(arguments: str) -> str:
    """The string a custom call carries, from the model's arguments. A model that wrote
    something other than `{"input": "…"}` gets its raw text passed on, for the tool to reject."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get(CUSTOM_ARGUMENT), str):
        return parsed[CUSTOM_ARGUMENT]
    return parsed if isinstance(parsed, str) else arguments


_INPUT_HEAD = re.compile(r'\s*\{\s*"input"\s*:\s*"')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class CustomInputStream:
    """A custom call's input, decoded as the model writes `{"input": "…"}` around it, so it can be
    streamed (`response.custom_tool_call_input.delta`) before the call ends. `feed` takes the next
    piece of the arguments' text and returns the input's text it completes: nothing until the
    string has opened, nothing more after it closed or once the arguments turn out to be
    something else (`broken`: the input is then only known, from `custom_input`, at the end)."""

    __slots__ = ("_closed", "_raw", "_read", "broken", "text")

    def __init__(self) -> None:
        self._raw = ""
        self._read = -1  # where the string's undecoded text starts (-1: not opened yet)
        self._closed = False
        self.broken = False
        self.text = ""  # the input decoded so far

    def feed(self, piece: str) -> str:
        self._raw += piece
        if self.broken or self._closed:
            return ""
        if self._read < 0:
            head = _INPUT_HEAD.match(self._raw)
            if head is None:
                self.broken = not _could_open(self._raw)
                return ""
            self._read = head.end()
        decoded = self._decode()
        self.text += decoded
        return decoded

    def _decode(self) -> str:
        raw, i, out = self._raw, self._read, []
        while i < len(raw):
            char = raw[i]
            if char == '"':
                self._closed = True
                break
            if char != "\\":
                out.append(char)
                i += 1
                continue
            if i + 1 >= len(raw):
                break  # the escape goes on in the next piece
            kind = raw[i + 1]
            if kind == "u":
                if i + 6 > len(raw):
                    break
                try:
                    code = int(raw[i + 2:i + 6], 16)
                except ValueError:
                    self.broken = True
                    break
                if 0xD800 <= code < 0xDC00:  # a surrogate pair: both halves or wait
                    if i + 12 > len(raw):
                        break
                    try:
                        code = 0x10000 + ((code - 0xD800) << 10) + (int(raw[i + 8:i + 12], 16) - 0xDC00)
                    except ValueError:
                        self.broken = True
                        break
                    i += 6
                out.append(chr(code))
                i += 6
            elif kind in _ESCAPES:
                out.append(_ESCAPES[kind])
                i += 2
            else:
                self.broken = True
                break
        self._read = i
        return "".join(out)


def _could_open(raw: str) -> bool:
    """Whether more text could still make `raw` the opening of `{"input": "`."""
    compact = "".join(raw.split())
    return '{"input":"'.startswith(compact)
