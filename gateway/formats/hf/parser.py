"""Streaming parser for Qwen3-style output: `<think>` reasoning and hermes `<tool_call>` blocks.

The markers are single added tokens, so the parser switches state on token ids and never
scans text. Text is detokenized from a per-id byte table (byte-level BPE: every id is a fixed
byte string) through an incremental UTF-8 decoder, so a character split across tokens comes
out whole, exactly as `tokenizer.decode` would write it.

Items keep their text without the newlines that only separate markup: the "\\n\\n" after
`</think>`, the "\\n" around `<tool_call>` blocks and inside `<think>\\n…\\n</think>`.
"""

from __future__ import annotations

import json
import re
from codecs import utf_8_decode
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.formats.base import ItemDelta, ItemDone, ItemKind, ItemStarted, ParseEvent

__all__ = ["HermesOutputParser", "Markup", "parse_tool_call", "written_arguments"]


@dataclass(frozen=True, slots=True)
class Markup:
    """Token ids of the markers (None when the vocabulary lacks one) and their text."""

    think_open: int | None
    think_close: int | None
    call_open: int | None
    call_close: int | None
    text: dict[int, bytes]  # each marker id -> its literal text, for markers out of place

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(self.text)


class HermesOutputParser:
    """Output ids in, reasoning / text / tool-call item events out (see `OutputParser`)."""

    trim_newlines = True  # Qwen's markup owns the newlines around it; formats whose markup has none say so

    def __init__(self, token_bytes: list[bytes], markup: Markup, stop_ids: frozenset[int],
                 starts_in_reasoning: bool = False) -> None:
        self._bytes = token_bytes
        self._markup = markup
        self._markup_ids = markup.ids
        self._stop_ids = stop_ids
        self._next_index = 0
        self._mode: ItemKind = "reasoning" if starts_in_reasoning else "text"
        self._open_segment()
        self._call = bytearray()  # the raw body of an open <tool_call>
        self._events: list[ParseEvent] = []
        self._call_index: int | None = None  # the item of a call whose arguments stream (`_emit`)
        self._streamed: list[str] = []  # its arguments streamed so far
        self._properties: dict[str, Any] = {}  # the open call's parameter schemas (`_start_object`)
        self._members = 0  # members of its arguments' object written so far
        self.reasoning_tokens = 0  # tokens read in reasoning mode, `</think>` included

    @property
    def in_tool_call(self) -> bool:
        """A `<tool_call>` is open: its item starts only once it closes (a steer waits for that)."""
        return self._mode == "tool_call"

    def feed(self, token_ids: Sequence[int]) -> list[ParseEvent]:
        table, size = self._bytes, len(self._bytes)
        for token_id in token_ids:
            if self._mode == "reasoning":
                self.reasoning_tokens += 1
            if token_id in self._markup_ids:
                self._on_markup(token_id)
            elif token_id in self._stop_ids or not 0 <= token_id < size:
                continue
            elif self._mode == "tool_call":
                self._call += table[token_id]
            else:
                self._pending += table[token_id]
        self._flush()
        return self._take_events()

    def finish(self) -> list[ParseEvent]:
        if self._mode == "tool_call":
            self._raw_text_item(b"%s%s" % (self._markup.text[self._markup.call_open], self._call))
            self._mode = "text"
            self._open_segment()
        else:
            self._close_segment()
        return self._take_events()

    def _take_events(self) -> list[ParseEvent]:
        events, self._events = self._events, []
        return events

    def _on_markup(self, token_id: int) -> None:
        markup = self._markup
        if self._mode == "tool_call":
            if token_id == markup.call_close:
                self._end_call()
            else:
                self._call += markup.text[token_id]
        elif self._mode == "reasoning" and token_id == markup.think_close:
            self._switch("text")
        elif self._mode == "text" and token_id == markup.think_open:
            self._switch("reasoning")
        elif self._mode == "text" and token_id == markup.call_open:
            self._close_segment()
            self._mode = "tool_call"
            self._call.clear()
        else:  # a marker out of place is just text
            self._pending += markup.text[token_id]

    def _switch(self, mode: ItemKind) -> None:
        self._close_segment()
        self._mode = mode
        self._open_segment()

    # Reasoning and text segments -------------------------------------------------------

    def _open_segment(self) -> None:
        self._pending = bytearray()
        self._undecoded = b""  # the start of a character whose other bytes are in later tokens
        self._index: int | None = None  # assigned when the first visible text arrives
        self._parts: list[str] = []
        self._newlines = ""  # trailing newlines held back until more text follows

    def _flush(self, final: bool = False) -> None:
        if self._mode == "tool_call":
            return
        # codecs' incremental decoder, minus its Python frame: one C call per token at engine pace
        data = self._undecoded + self._pending if self._undecoded else bytes(self._pending)
        text, used = utf_8_decode(data, "replace", final)
        self._undecoded = data[used:]
        self._pending.clear()
        if not text:
            return
        if self._index is None:
            if self.trim_newlines:
                text = text.lstrip("\n")
            if not text:
                return
            self._index = self._start(self._mode)
        text = self._newlines + text
        visible = text.rstrip("\n") if self.trim_newlines else text
        self._newlines = text[len(visible) :]
        if visible:
            self._parts.append(visible)
            self._events.append(ItemDelta(self._index, visible))

    def _close_segment(self) -> None:
        self._flush(final=True)
        if self._index is not None:
            self._events.append(ItemDone(self._index, "".join(self._parts)))
        self._open_segment()

    # Tool calls ---------------------------------------------------------------------------

    def _end_call(self) -> None:
        self._json_call(bytes(self._call))
        self._call.clear()
        self._mode = "text"
        self._open_segment()

    def _json_call(self, body: bytes) -> None:
        """A hermes call's body, `{"name": …, "arguments": …}`, as one tool-call item; as text
        (with its markup) when it is not one."""
        call = self._call_of(body)
        if call is None:
            markup = self._markup
            self._raw_text_item(markup.text[markup.call_open] + body + markup.text[markup.call_close])
        else:
            self._whole_calls([call])

    def _call_of(self, body: bytes) -> tuple[str, str] | None:
        """(name, arguments JSON) of a call's body, or None (a family writing its body otherwise says how)."""
        return parse_tool_call(body.decode("utf-8", errors="replace"))

    def _whole_calls(self, calls: Iterable[tuple[str, str] | tuple[str, str, str | None]]) -> None:
        """Calls read whole, (name, arguments JSON[, the call's own id]): each one item, its arguments in one delta."""
        for name, arguments, *call_id in calls:
            index = self._start("tool_call", name, *call_id)
            self._events += [ItemDelta(index, arguments), ItemDone(index, arguments)]

    def _start_call(self, name: str, call_id: str | None = None) -> None:
        """A call whose arguments stream: its item starts, its arguments follow (`_emit`)."""
        self._call_index = self._start("tool_call", name, call_id)
        self._streamed = []

    def _emit(self, text: str) -> None:
        """The open call's next piece of arguments."""
        if text:
            assert self._call_index is not None
            self._streamed.append(text)
            self._events.append(ItemDelta(self._call_index, text))

    def _end_arguments(self) -> None:
        """The open call's arguments are all written: its item is done."""
        assert self._call_index is not None
        self._events.append(ItemDone(self._call_index, "".join(self._streamed)))
        self._call_index = None

    def _start_object(self, name: str, properties: dict[str, Any]) -> None:
        """A call whose arguments stream as a JSON object, one member at a time (families that write
        each parameter in markup); `properties`: the tool's parameter schemas, which type the values."""
        self._start_call(name)
        self._properties, self._members = properties, 0
        self._emit("{")

    def _member(self, key: str, written: str) -> None:
        """The object's next member: its key and what of its value is known now (a comma before all
        but the first)."""
        self._emit(f"{', ' if self._members else ''}{json.dumps(key, ensure_ascii=False)}: {written}")
        self._members += 1

    def _end_object(self) -> None:
        self._emit("}")
        self._end_arguments()

    def _raw_text_item(self, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace")
        index = self._start("text")
        self._events += [ItemDelta(index, text), ItemDone(index, text)]

    def _start(self, kind: ItemKind, name: str | None = None, call_id: str | None = None) -> int:
        index = self._next_index
        self._next_index += 1
        self._events.append(ItemStarted(index, kind, name=name, call_id=call_id))
        return index


def parse_tool_call(body: str) -> tuple[str, str] | None:
    """(name, arguments JSON) from a hermes `{"name": …, "arguments": …}` body, or None.

    The arguments keep the text the model wrote when they are the object's last member (as
    Qwen writes them), so rendering the call again reproduces the model's own text; otherwise
    they are the compact JSON of the parsed value. String arguments are taken as they are.
    """
    try:
        call = json.loads(body)
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
        return None
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        return call["name"], arguments
    return call["name"], written_arguments(body, "arguments", arguments, separators=(",", ":"))


def written_arguments(body: str, key: str, arguments: object, separators: tuple[str, str] = (", ", ": ")) -> str:
    """A call's arguments (the value of its `key`) as the model wrote them in the JSON object `body`,
    when they are its last member; otherwise as `json.dumps` writes them with `separators`."""
    decoder = json.JSONDecoder()
    for found in re.finditer(f'"{re.escape(key)}"\\s*:\\s*', body):
        try:
            value, end = decoder.raw_decode(body, found.end())
        except ValueError:
            continue
        if value == arguments and body[end:].strip() == "}":
            return body[found.end() : end]
    return json.dumps(arguments, ensure_ascii=False, separators=separators)
