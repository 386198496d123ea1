"""State as bytes, for a store shared by processes: token ids as int32, the rest as JSON.

Token ids are the bulk of every piece of state (a 128k-token session is 512 KB as int32,
several MB as JSON), so they travel as raw little-endian int32 bytes in logs the store
appends to; the metadata beside them (a `TokenState`'s counts and digests, a
`ResentPrefix`, a stored response's conversation) is small JSON. No pickle: whoever can
write the store must not be able to run code in the gateway.

A `TokenState` read back has no running history hashes (`HistoryHash` objects cannot be
exported): the next turn hashes its items again instead of extending them, which costs
time, never exactness.
"""

from __future__ import annotations

import dataclasses
import sys
from array import array
from typing import Any

import orjson

from gateway.core.conversation import Conversation, Message, Reasoning, Tool, ToolCall, ToolOutput
from gateway.core.image import Image
from gateway.tokenfix.state import TokenState

__all__ = ["dumps", "ids_from_bytes", "ids_to_bytes", "loads", "state_from", "state_meta"]

_LITTLE = sys.byteorder == "little"
# An Image travels as its data URL: a stored conversation is continued by another process with its
# images (bounded by --max-image-bytes and --max-images per request).
_TYPES: dict[str, type] = {cls.__name__: cls for cls in (Conversation, Message, Reasoning, Tool, ToolCall,
                                                         ToolOutput, Image)}


def ids_to_bytes(ids: Any) -> bytes:
    """int32 little-endian bytes of a sequence of ids (an int32 array is copied once)."""
    values = ids if isinstance(ids, array) and ids.typecode == "i" else array("i", ids)
    if not _LITTLE:
        values = array("i", values)
        values.byteswap()
    return values.tobytes()


def ids_from_bytes(data: bytes) -> array:
    values = array("i")
    values.frombytes(data)
    if not _LITTLE:
        values.byteswap()
    return values


def state_meta(state: TokenState) -> dict[str, Any]:
    """Everything of a `TokenState` but its tokens, as JSON-able values."""
    return {"context": state.context.hex(), "items": state.items, "digest": state.digest.hex(),
            "prompt_len": state.prompt_len, "prompt_items": state.prompt_items,
            "prompt_turns": state.prompt_turns, "model_turns": state.model_turns}


def state_from(meta: dict[str, Any], tokens: array) -> TokenState:
    return TokenState(bytes.fromhex(meta["context"]), meta["items"], bytes.fromhex(meta["digest"]), tokens,
                      meta["prompt_len"], meta["prompt_items"], meta["prompt_turns"], meta["model_turns"])


def dumps(value: Any) -> bytes:
    """JSON of plain values and the conversation's dataclasses (tagged with their type)."""
    return orjson.dumps(value, default=_encode, option=orjson.OPT_PASSTHROUGH_DATACLASS)


def loads(data: bytes | str) -> Any:
    return _decode(orjson.loads(data))


def _encode(value: Any) -> Any:
    if type(value).__name__ in _TYPES and dataclasses.is_dataclass(value):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if isinstance(value, Conversation):
            fields["items"] = list(value.items)  # a lazily converted sequence is a list here
        return {"@": type(value).__name__, **fields}
    if isinstance(value, bytes):
        return {"@bytes": value.hex()}
    raise TypeError(f"cannot store a {type(value).__name__}")


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if "@bytes" in value:
            return bytes.fromhex(value["@bytes"])
        tag = value.get("@")
        fields = {k: _decode(v) for k, v in value.items() if k != "@"}
        if tag in ("Message", "ToolOutput") and "parts" in fields:
            fields["parts"] = tuple(fields["parts"])
        return _TYPES[tag](**fields) if tag in _TYPES else fields
    return value
