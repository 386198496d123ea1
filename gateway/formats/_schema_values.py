"""A tool parameter's value typed by the tool's JSON schema, as vLLM 0.32 types the values of the
families that write parameters as text (`ParserEngine._fix_arg_types` → `tool_parsers/utils.py`
`coerce_to_schema_type`): GLM's `<arg_value>` and the invoke blocks' `<parameter>` (DSML, MiniMax)
share it, so it lives here rather than in one family's module.

A value is tried as null > integer > number > boolean > object > array > string, the first type
the schema allows that fits; then as any JSON; else it stays its text. Type names are read with
vLLM's aliases (`int64` is an integer, `dict` an object …).
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["convert_arg_value", "is_text", "properties"]

_TYPE_ALIASES = {
    "str": "string", "text": "string", "varchar": "string", "char": "string", "enum": "string",
    "int": "integer", "int32": "integer", "int64": "integer", "uint": "integer", "uint32": "integer",
    "uint64": "integer", "long": "integer", "short": "integer", "unsigned": "integer", "float": "number",
    "float32": "number", "float64": "number", "double": "number", "bool": "boolean", "dict": "object",
    "arr": "array", "list": "array", "sequence": "array",
}
_PRIORITY = ("null", "integer", "number", "boolean", "object", "array", "string")


def properties(parameters: dict[str, Any]) -> dict[str, Any]:
    """A tool's parameter schemas by name ({} when its `parameters` declare none)."""
    found = parameters.get("properties") if isinstance(parameters, dict) else None
    return found if isinstance(found, dict) else {}


def schema_types(schema: Any) -> set[str]:
    """vLLM's `extract_types_from_schema`: `type` (one or a list), the types of `enum` values,
    and those of `anyOf`/`oneOf`/`allOf`, recursively; {"string"} when it says nothing."""
    if not isinstance(schema, dict):
        return {"string"}
    types: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str):
        types.add(declared)
    elif isinstance(declared, list):
        types.update(t for t in declared if isinstance(t, str))
    enum = schema.get("enum")
    if isinstance(enum, list):
        for value in enum:
            types.add(_json_type(value))
    for choice in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(choice), list):
            for option in schema[choice]:
                types |= schema_types(option)
    return types or {"string"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "string"


def is_text(schema: Any) -> bool:
    """Whether a parameter's value is its own text whatever it says (so it can stream as written):
    its schema allows strings only, or it is undeclared (`schema` None or not a dict)."""
    if not isinstance(schema, dict):
        return True
    return _types(schema) == {"string"}


def _types(schema: dict[str, Any]) -> set[str]:
    return {_TYPE_ALIASES.get(t.strip().lower(), t.strip().lower()) for t in schema_types(schema)}


def convert_arg_value(value: str, schema: Any) -> Any:
    """A value's text as the JSON value vLLM 0.32 makes of it for a parameter with `schema`
    (None or not a dict: an undeclared parameter, which stays text)."""
    if not isinstance(schema, dict):
        return value
    types = _types(schema)
    for candidate in _PRIORITY:
        if candidate not in types:
            continue
        if candidate == "null":
            if value.lower() == "null":
                return None
        elif candidate == "string":
            return value
        elif candidate == "integer":
            try:
                return int(value)
            except ValueError:
                pass
        elif candidate == "number":
            try:
                number = float(value)
            except ValueError:
                continue
            if math.isfinite(number):
                return number if number != int(number) else int(number)
        elif candidate == "boolean":
            word = value.lower().strip()
            if word in ("true", "1"):
                return True
            if word in ("false", "0"):
                return False
        else:  # object, array
            try:
                parsed = json.loads(value)
            except (ValueError, RecursionError):
                continue
            if _finite(parsed):
                return parsed
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return value
    return parsed if _finite(parsed) else value


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True
