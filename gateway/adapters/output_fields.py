"""The fields that constrain what the model may output, as one `OutputConstraint`.

`tool_choice` (`required`, a named function, `allowed_tools`), `parallel_tool_calls`,
`max_tool_calls` (the generation ends after that many calls, by grammar: calls are never
generated and then dropped), and the answer's format (Responses `text.format`, Chat `response_format`:
`json_schema` or `json_object`). The format turns the constraint into vLLM's structured
outputs in the model's own syntax (gateway/formats/hf_constraints.py), so a forced call is
what the model would have written, and nothing is accepted that is then ignored: what cannot
be enforced answers 400.
"""

from __future__ import annotations

from typing import Any

from gateway.adapters.validation import expect, expect_range, invalid_request
from gateway.core.sampling import OutputConstraint

__all__ = ["output_constraint", "tool_choice"]


def tool_choice(raw: Any) -> tuple[str, tuple[str, ...] | None]:
    """(auto | none | required | a function's name, the allowed names or None). Both APIs'
    shapes: `{"type": "function", "name": …}` (Responses), `{"type": "function", "function":
    {"name": …}}` (Chat), a custom tool's `{"type": "custom", "name": …}`, `{"type": "allowed_tools", "mode": …, "tools": [...]}` (both; Chat
    nests it under `allowed_tools`)."""
    if raw is None:
        return "auto", None
    if isinstance(raw, str):
        if raw not in ("auto", "none", "required"):
            raise invalid_request(f"Invalid value for 'tool_choice': {raw!r}; expected 'auto', 'none', "
                                  f"'required' or a function.", param="tool_choice")
        return raw, None
    if isinstance(raw, dict) and raw.get("type") in ("function", "custom"):
        name = raw.get("name") if "name" in raw else (raw.get(raw["type"]) or {}).get("name")
        if isinstance(name, str) and name:
            return name, None
    if isinstance(raw, dict) and raw.get("type") == "allowed_tools":
        spec = raw.get("allowed_tools") if isinstance(raw.get("allowed_tools"), dict) else raw
        mode = spec.get("mode", "auto")
        tools = spec.get("tools")
        if mode in ("auto", "required") and isinstance(tools, list) and tools:
            names = [tool.get("name") if "name" in tool else (tool.get("function") or {}).get("name")
                     for tool in tools if isinstance(tool, dict)]
            if len(names) == len(tools) and all(isinstance(name, str) for name in names):
                return mode, tuple(names)
        raise invalid_request("'tool_choice.tools' must list function tools by name, with 'mode' 'auto' or "
                              "'required'.", param="tool_choice")
    raise invalid_request("Invalid value for 'tool_choice'.", param="tool_choice")


def output_constraint(body: dict[str, Any], choice: str, allowed: tuple[str, ...] | None, *,
                      answer_format: Any, answer_param: str) -> OutputConstraint | None:
    """The constraint a request asks for; None when it asks for nothing beyond sampling."""
    parallel = expect(body.get("parallel_tool_calls"), bool, "parallel_tool_calls")
    max_calls = expect(body.get("max_tool_calls"), int, "max_tool_calls")
    expect_range(max_calls, "max_tool_calls", 1, None)
    constraint = OutputConstraint(
        tool_choice=choice if choice != "none" else "auto", allowed_tools=allowed,
        parallel_tool_calls=parallel is not False, max_tool_calls=max_calls,
        answer_schema=_answer_schema(answer_format, answer_param))
    return constraint if constraint.active else None


def _answer_schema(raw: Any, param: str) -> dict[str, Any] | None:
    if raw is None:
        return None
    raw = expect(raw, dict, param)
    kind = raw.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = raw.get("json_schema") if isinstance(raw.get("json_schema"), dict) else raw  # Chat nests it
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise invalid_request(f"'{param}.schema' must be a JSON schema object.", param=f"{param}.schema")
        return schema
    raise invalid_request(f"Unsupported '{param}.type' {kind!r}; expected 'text', 'json_object' or "
                          f"'json_schema'.", param=f"{param}.type", code="unsupported_value")
