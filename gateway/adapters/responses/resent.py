"""A full history sent again: recognising the part the session's tokens cover from its bytes.

Codex sends the whole conversation in `input` on every HTTP request, under its
`prompt_cache_key`. The session's exact tokens cover all of it but the model's last turn
and the new items, and that covered part is, byte for byte, what the previous request
sent: the same fields before `input`, then the same items, now followed by the model's turn
and the new items. So a session also keeps where the previous request's items ended in its
body and a 128-bit hash of the body up to there (`ResentPrefix`, about 100 bytes, not the body).
When a new body starts with those bytes, only the rest is parsed (the body with the covered
items cut out), the model's turn is checked against the state's running digest, and the
covered items are converted only if something reads them (a full render does; rendering
the new items after the model's turn does not). Anything else — other bytes, a reference
into the cut-out items, other fields that change how the items read — returns None: the
ordinary path then parses everything and checks the history item by item.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from operator import index as as_index
from typing import Any, overload

import orjson
import xxhash

from gateway.adapters.request_schema import validate_items
from gateway.adapters.responses.input import ResponsesRequest, input_items, parse_request
from gateway.core.conversation import Item
from gateway.core.errors import APIError
from gateway.formats.base import Covered
from gateway.store.sessions import ResentPrefix, Session
from gateway.tokenfix.state import TokenState, context_digest

__all__ = ["Resent", "parse_resent", "resent_prefix", "session_key"]

# XXH3-128, not a cryptographic hash: it reads the body's bytes at memory speed (SHA-256 took
# 0.36 ms of a 634 KB history, which is the growth this module removes). Accidental collisions
# are out of reach at 128 bits, and the seed is this process's secret. A deliberate collision
# would have to match bytes the attacker cannot see: a session's covered history, under its key;
# whoever has those bytes can simply send them.
_hash = partial(xxhash.xxh3_128, seed=int.from_bytes(os.urandom(8), "little"))
_DECODER = json.JSONDecoder()
_WHITESPACE = json.decoder.WHITESPACE
_CACHE_KEY = re.compile(rb'[ \t\n\r]*:[ \t\n\r]*("(?:[^"\\]|\\.)*")')


@dataclass(slots=True)
class Resent:
    parsed: ResponsesRequest  # its conversation's covered items are read from the body on demand
    state: TokenState  # the session's state it continues…
    covered: Covered  # …this far
    prefix: ResentPrefix  # for the state this request's turn leaves


def resent_prefix(raw: bytes, body: dict[str, Any], parsed: ResponsesRequest) -> ResentPrefix | None:
    """The prefix of a request parsed the ordinary way (`parse_request` of `raw`); None when its
    `input` is not a non-empty array. Scans the whole body once (C-level)."""
    span = _input_span(raw.decode("latin-1"))
    if span is None:
        return None
    start, first_end, end = span
    field = body.get("instructions") is not None
    taken = not field and parsed.conversation.instructions is not None
    return ResentPrefix(start, end, _hash(memoryview(raw)[:end]).digest(), len(parsed.conversation.items),
                        first_end if taken else 0, field)


def session_key(raw: bytes) -> str | None:
    """The `prompt_cache_key` of the body in `raw`, read off its bytes: the session whose
    state `parse_resent` may continue (None: there is none to look up)."""
    return _session_key(raw)


def parse_resent(raw: bytes, key: str, found: Session, terminators: frozenset[int]) -> Resent | None:
    """The request in `raw` when it continues `found` (the session under its session key `key`,
    the body's `prompt_cache_key`) from the bytes it has in common with the request before; None: parse it the ordinary
    way. Pure: the caller looked the session up."""
    if found.resent is None:
        return None
    state, prefix = found.state, found.resent
    if prefix.items != state.prompt_items or state.prompt_hash is None:
        return None
    if len(raw) <= prefix.end or raw[prefix.end] != ord(","):
        return None  # no item follows the covered ones
    running = _hash(memoryview(raw)[:prefix.end])
    if running.digest() != prefix.digest:
        return None
    cut = raw[:prefix.start + 1] + raw[prefix.end + 1:]  # the body with the covered items taken out
    span = _input_span(cut.decode("latin-1"))
    try:
        body = orjson.loads(cut)
    except orjson.JSONDecodeError:
        return None
    if (span is None or span[0] != prefix.start or not isinstance(body, dict) or body.get("prompt_cache_key") != key
            or body.get("previous_response_id") is not None or body.get("conversation") is not None
            or "rollout_id" in body
            or any(isinstance(tool, dict) and tool.get("type") == "mcp" for tool in body.get("tools") or ())
            or (body.get("instructions") is not None) != prefix.instructions_field):
        return None
    instructions = body.get("instructions")
    try:
        if prefix.instructions_end:
            instructions = _items(raw[prefix.start:prefix.instructions_end] + b"]")[0].text
        # "" keeps a leading developer message among the new items, as it is in the whole history.
        parsed = parse_request({**body, "instructions": "" if instructions is None else instructions})
    except (APIError, orjson.JSONDecodeError):
        return None  # e.g. an output answering a call among the covered items: the full parse knows it
    new = parsed.conversation.items
    turn = state.items - prefix.items  # the model's turn comes first among the new items
    if len(new) <= turn or state.prompt_hash.copy().update(new[:turn]).digest() != state.digest:
        return None
    parsed.conversation.instructions = instructions
    parsed.conversation.items = ResentItems(partial(_covered_items, raw, prefix), prefix.items, new)  # type: ignore[assignment]
    parsed.echo["instructions"] = body.get("instructions")
    if context_digest(parsed.conversation) != state.context:
        return None
    end = span[2] + prefix.end - prefix.start  # the last new item's end, back in `raw`
    running.update(memoryview(raw)[prefix.end:end])
    following = ResentPrefix(prefix.start, end, running.digest(), prefix.items + len(new), prefix.instructions_end,
                             prefix.instructions_field)
    return Resent(parsed, state, state.covered(terminators), following)


class ResentItems(Sequence[Item]):
    """A conversation's items whose first `skipped` are converted from the body on first read:
    reading only the new ones (`items[skipped:]`) never converts the others."""

    __slots__ = ("_all", "_load", "_new", "_skipped")

    def __init__(self, load: Callable[[], list[Item]], skipped: int, new: list[Item]) -> None:
        self._load = load
        self._skipped = skipped
        self._new = new
        self._all: list[Item] | None = None

    def __len__(self) -> int:
        return self._skipped + len(self._new)

    @overload
    def __getitem__(self, index: int) -> Item: ...

    @overload
    def __getitem__(self, index: slice) -> list[Item]: ...

    def __getitem__(self, index: int | slice) -> Item | list[Item]:
        if self._all is None:
            if isinstance(index, slice):
                start, stop, step = index.indices(len(self))
                if step == 1 and start >= self._skipped:
                    return self._new[start - self._skipped:max(start, stop) - self._skipped]
            else:
                position = as_index(index) + (len(self) if index < 0 else 0)
                if position >= self._skipped:
                    return self._new[position - self._skipped]
        return self.materialized()[index]

    def __iter__(self) -> Iterator[Item]:
        return iter(self.materialized())

    @property
    def converted(self) -> bool:
        """Whether the covered items have been read from the body (by a read that needed them)."""
        return self._all is not None

    def materialized(self) -> list[Item]:
        if self._all is None:
            covered = self._load()
            assert len(covered) == self._skipped, "the covered items read differently than before"
            self._all = [*covered, *self._new]
        return self._all


def _covered_items(raw: bytes, prefix: ResentPrefix) -> list[Item]:
    """The covered input items, converted as the request that sent them first had them."""
    items = _items(raw[prefix.start:prefix.end] + b"]")
    return items[1:] if prefix.instructions_end else items


def _items(array_bytes: bytes) -> list[Item]:
    """Input items from the bytes of a JSON array, checked by the schema a body's `input` is."""
    return input_items(validate_items(orjson.loads(array_bytes), "input"), {}, [])


def _session_key(raw: bytes) -> str | None:
    """The body's `prompt_cache_key`, found without parsing the body (it ends Codex's): the
    last such key in the bytes; the parsed body must then agree."""
    at = raw.rfind(b'"prompt_cache_key"')
    match = _CACHE_KEY.match(raw, at + 18) if at >= 0 else None
    if match is None:
        return None
    try:
        key = orjson.loads(match.group(1))
    except orjson.JSONDecodeError:
        return None
    return key if isinstance(key, str) else None


def _input_span(text: str) -> tuple[int, int, int] | None:
    """Offsets of the top-level `input` array of the JSON object in `text`: its '[', the end of
    its first item and the end of its last. None unless the object has exactly one `input`, a
    non-empty array. `text` is the body decoded as latin-1: JSON's syntax is ASCII, so these
    are byte offsets. Values are scanned by the json module's C scanner."""
    span = None
    try:
        index = _WHITESPACE.match(text, 0).end()
        if text[index] != "{":
            return None
        index = _WHITESPACE.match(text, index + 1).end()
        while text[index] == '"':
            key, index = json.decoder.scanstring(text, index + 1)
            index = _WHITESPACE.match(text, index).end()
            if text[index] != ":":
                return None
            index = _WHITESPACE.match(text, index + 1).end()
            if key == "input":
                if span is not None or text[index] != "[":
                    return None
                first_end = _DECODER.raw_decode(text, _WHITESPACE.match(text, index + 1).end())[1]
                _, end = _DECODER.raw_decode(text, index)
                last = end - 1  # the ']'; the last item ends before the whitespace in front of it
                while text[last - 1] in " \t\n\r":
                    last -= 1
                span = (index, first_end, last)
                index = end
            else:
                index = _DECODER.raw_decode(text, index)[1]
            index = _WHITESPACE.match(text, index).end()
            if text[index] == ",":
                index = _WHITESPACE.match(text, index + 1).end()
            elif text[index] == "}":
                return span
            else:
                return None
    except (ValueError, IndexError):  # json.JSONDecodeError is a ValueError
        return None
    return None
