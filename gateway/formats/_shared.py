"""What several families' parsers and templates need alike, in one module every family may
import (no family imports another): which call names are names (vLLM's parsers refuse the same
ones), and the message shapes templates take — a call's JSON arguments as the dict a template
iterates, and system messages merged where a template takes one."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_NAME", "accepts_name", "argument_dict", "is_valid_name", "json_call_list", "merge_system_messages", "qwen_messages", "with_argument_dicts"]

MAX_NAME = 256  # a function or parameter name longer than this is not markup
_FORBIDDEN_IN_NAME = frozenset("{}<>\"' \t\n\r")


def is_valid_name(name: str) -> bool:
    """vLLM's `_is_valid_function_name`, bounded: not empty, not too long, no template or markup characters."""
    return 0 < len(name) <= MAX_NAME and not any(c in _FORBIDDEN_IN_NAME for c in name)


def accepts_name(name: str, tools: frozenset[str]) -> bool:
    """Whether a call's name is a call: a valid name, and one of the request's tools when it has tools."""
    return is_valid_name(name) and (not tools or name in tools)


def json_call_list(text: str) -> list[dict[str, Any]] | None:
    """`[{"name": …, …}, …]`: a JSON list of call objects, each with a string `name`, or None when
    `text` is not one (xLAM's and Phi-4-mini's answers, Mistral's calls before v11)."""
    try:
        calls = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(calls, list) or not calls:
        return None
    return calls if all(isinstance(call, dict) and isinstance(call.get("name"), str) for call in calls) else None


def argument_dict(arguments: str) -> dict[str, Any]:
    """A call's JSON arguments as the dict the template iterates ({} when they are not a JSON
    object: only a malformed history has such a call, and the template cannot write it)."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def with_argument_dicts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`hf_messages`' messages with each call's arguments as the dict a template writes (`tojson`
    or a loop over its items)."""
    return [{**m, "tool_calls": [{**c, "function": {**c["function"], "arguments": argument_dict(c["function"]["arguments"])}}
                                 for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in messages]


def merge_system_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The leading system messages as one (joined by a blank line); a later one as a user message
    (templates that take a single system message at the top)."""
    leading = 0
    while leading < len(messages) and messages[leading]["role"] == "system":
        leading += 1
    out: list[dict[str, Any]] = []
    if leading:
        texts = [m["content"] for m in messages[:leading]]
        out.append({"role": "system", "content": "\n\n".join(texts)})
    for message in messages[leading:]:
        out.append({**message, "role": "user"} if message["role"] == "system" else message)
    return out


def qwen_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`hf_messages`' messages as Qwen3.5/3.6's template takes them, and the templates written
    after it (Seed-OSS, Step-3.5, MiniMax-M2): tool-call arguments as dicts, one leading system
    message."""
    return merge_system_messages(with_argument_dicts(messages))
