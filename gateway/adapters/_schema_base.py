"""The building blocks of the typed request models (gateway/adapters/request_schema.py for the
bodies and their items, gateway/adapters/_tool_schema.py for tools and `tool_choice`).

Models are strict (no "5" for 5, no true for 1) and keep fields they do not name (items and
tools carry ids, statuses, newer options the gateway ignores). Free-form objects the gateway
echoes or renders (metadata, a tool's parameters, ...) are bounded in depth: the response's JSON
encoder and the template's escape walk both stop at a few hundred levels. A union of shapes is
told apart by its `type` with a fallback shape for the rest (`by_type`), so an unknown kind
reaches the adapter, which names it in its 400 or drops it, instead of one pydantic error per
shape it is not.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Annotated, Any

import orjson
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

__all__ = ["MAX_DEPTH", "Bounded", "Model", "Obj", "Objs", "by_type"]

MAX_DEPTH = 128  # nesting of a free-form object; orjson encodes at most 254 (the response adds a few)


def _bounded(value: Any) -> Any:
    """Free-form JSON no deeper than MAX_DEPTH. orjson's encoder (C, ~100x faster than a walk in
    Python, and it never recurses in Python) refuses more than 254 levels: the value, put inside
    254 - MAX_DEPTH arrays, encodes exactly when it is no deeper than MAX_DEPTH."""
    wrapped = value
    for _ in range(_WRAPS):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped)
    except orjson.JSONEncodeError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    return value


_WRAPS = 254 - MAX_DEPTH
Obj = Annotated[dict[str, Any], AfterValidator(_bounded)]
Objs = Annotated[list[dict[str, Any]], AfterValidator(_bounded)]  # checked whole: one encode, not one per element
# A list of models (`tools`) bounded whole, as it came, before its models are built: one encode
# for the list, where a bound on each model's free-form fields costs one per field.
Bounded = BeforeValidator(_bounded)


class Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


def by_type(known: Collection[str], other: str | None = "other", *, default: str | None = None
            ) -> Callable[[Any], str | None]:
    """A discriminator: an object's `type` when it is one of `known` (`default` when it has none),
    else `other`; None (a type error) for what is not an object. (A model, when one is dumped.)"""
    def tag(value: Any) -> str | None:
        if isinstance(value, BaseModel):
            kind = getattr(value, "type", default)
        elif isinstance(value, dict):
            kind = value.get("type", default)
        else:
            return None
        return kind if isinstance(kind, str) and kind in known else other
    return tag
