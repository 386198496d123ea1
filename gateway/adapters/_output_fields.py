"""The fields that constrain what the model may output, as one `OutputConstraint`.

`tool_choice` (`required`, a named function, `allowed_tools`), `parallel_tool_calls`,
`max_tool_calls` (the generation ends after that many calls, by grammar: calls are never
generated and then dropped), and the answer's format (Responses `text.format`, Chat `response_format`:
`json_schema` or `json_object`). The format turns the constraint into vLLM's structured
outputs in the model's own syntax (gateway/formats/hf/constraints.py), so a forced call is
what the model would have written, and nothing is accepted that is then ignored: what cannot
be enforced answers 400.
"""

from __future__ import annotations

from typing import Any

from gateway.adapters._tool_schema import (
    AllowedToolsChoice,
    ChatAllowedToolsChoice,
    ChatNamedChoice,
    ChatToolChoice,
    NamedChoice,
    ToolChoice,
)
from gateway.adapters.request_schema import AnswerFormat, ChatAnswerFormat, ChatJsonSchemaFormat, JsonSchemaFormat
from gateway.adapters.validation import invalid_request
from gateway.core.sampling import OutputConstraint

__all__ = ["output_constraint", "tool_choice"]


def tool_choice(choice: ToolChoice | ChatToolChoice | None) -> tuple[str, tuple[str, ...] | None]:
    """(auto | none | required | a tool's name, the allowed names or None), from either API's
    shape (gateway/adapters/_tool_schema.py)."""
    if choice is None:
        return "auto", None
    if isinstance(choice, str):
        return choice, None
    if isinstance(choice, NamedChoice):
        return choice.name, None
    if isinstance(choice, ChatNamedChoice):
        named = choice.function if choice.type == "function" else choice.custom
        if named is None:
            raise invalid_request(f"Missing required parameter: 'tool_choice.{choice.type}'.",
                                  param=f"tool_choice.{choice.type}", code="missing_required_parameter")
        return named.name, None
    if isinstance(choice, AllowedToolsChoice):
        return choice.mode, _allowed([tool.name for tool in choice.tools], "tool_choice.tools")
    if isinstance(choice, ChatAllowedToolsChoice):
        spec = choice.allowed_tools
        names = [named.name if (named := tool.function or tool.custom) is not None else None for tool in spec.tools]
        return spec.mode, _allowed(names, "tool_choice.allowed_tools.tools")
    raise invalid_request(f"'tool_choice' names a {choice.type!r} tool, which this gateway does not offer the "
                          f"model; choose a function or custom tool by name (an MCP server's tool is the function "
                          f"'<server_label>__<name>').", param="tool_choice.type", code="unsupported_value")


def _allowed(names: list[str | None], param: str) -> tuple[str, ...]:
    for i, name in enumerate(names):
        if name is None:
            raise invalid_request(f"'{param}[{i}]' must name a function or custom tool.", param=f"{param}[{i}]",
                                  code="invalid_value")
    if not names:
        raise invalid_request(f"'{param}' must list at least one tool.", param=param, code="invalid_value")
    return tuple(name for name in names if name is not None)


def output_constraint(choice: str, allowed: tuple[str, ...] | None, *, parallel: bool | None,
                      max_calls: int | None, answer: AnswerFormat | ChatAnswerFormat | None,
                      answer_param: str) -> OutputConstraint | None:
    """The constraint a request asks for; None when it asks for nothing beyond sampling."""
    constraint = OutputConstraint(
        tool_choice=choice if choice != "none" else "auto", allowed_tools=allowed,
        parallel_tool_calls=parallel is not False, max_tool_calls=max_calls,
        answer_schema=_answer_schema(answer, answer_param))
    return constraint if constraint.active else None


def _answer_schema(answer: AnswerFormat | ChatAnswerFormat | None, param: str) -> dict[str, Any] | None:
    if isinstance(answer, JsonSchemaFormat):
        return answer.schema_
    if isinstance(answer, ChatJsonSchemaFormat):
        if answer.json_schema.schema_ is None:
            raise invalid_request(f"'{param}.json_schema.schema' must be a JSON schema object: it is what the "
                                  f"answer is held to.", param=f"{param}.json_schema.schema",
                                  code="missing_required_parameter")
        return answer.json_schema.schema_
    if answer is not None and answer.type == "json_object":
        return {"type": "object"}
    return None
