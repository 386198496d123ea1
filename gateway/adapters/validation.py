"""Small checks that turn bad request JSON into precise OpenAI-shaped 400s (field types are the
typed models': gateway/adapters/request_schema.py)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import orjson

from gateway.core.errors import APIError, invalid_request

__all__ = ["check_model", "expect_range", "invalid_request", "parse_json", "type_name"]

TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
              list: "an array", dict: "an object", type(None): "null"}  # as every 400 names a JSON type


def expect_range(value: float | None, param: str, low: float | None, high: float | None) -> None:
    if value is None:
        return
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"between {low} and {high}" if low is not None and high is not None else (
            f"at least {low}" if low is not None else f"at most {high}")
        raise invalid_request(f"Invalid value for '{param}': {value} is not {bounds}.", param=param,
                              code="invalid_value")


def type_name(value: Any) -> str:
    """The JSON type of `value`, as an error message names it."""
    return TYPE_NAMES.get(type(value), type(value).__name__)


def check_model(served: str, model: str, adapters: Collection[str] = ()) -> str | None:
    """404 unless `model` is the one the gateway serves, or one of the LoRA `adapters` its replicas
    hold where the API takes one (every API's `model` field); the adapter it names, None for the base."""
    if model in adapters and model != served:
        return model
    if model != served:
        held = f" and the LoRA adapters {', '.join(sorted(adapters))}" if adapters else ""
        raise APIError(f"The model '{model}' does not exist; this gateway serves '{served}'{held}.",
                       status=404, code="model_not_found", param="model")
    return None


def parse_json(raw: bytes) -> Any:
    """A request body or frame as JSON; a 400 that says where it is not."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid_request(f"The request body is not valid JSON: {exc}.", code="invalid_json") from None
