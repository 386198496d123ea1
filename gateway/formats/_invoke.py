"""Tool calls written as blocks of `<invoke name="NAME">` with `<parameter …>VALUE</parameter>` tags:
DeepSeek-V3.2/V4's DSML (`dsml`) and MiniMax-M2's (`minimax`), one streaming parser for both.

The two families write the same layout with different tags. Only some of their markup is single
added tokens (DSML's `｜DSML｜`, MiniMax's `<minimax:tool_call>` and `</minimax:tool_call>`); the
brackets, names and attributes around them are ordinary text. The parser carries each such id as
one private character (a Unicode noncharacter, `Tags.marks`) through the text it scans, so a tag
that needs an id is structure only where the model wrote that id, and the same letters written in
text pieces stay text. A block opens on its opener id (MiniMax), or on a `<` just before it that
turns out to spell the block's tag (DSML: text holds back a trailing `<` until the next token).

Values are read as vLLM reads the family's (`value`), then converted by the tool's JSON schema as
vLLM's `ParserEngine._fix_arg_types` converts them (`schema_values.convert_arg_value`: a string parameter keeps
`5` as "5", an integer one makes "5" 5); nested objects and arrays are not converted further. The
arguments stream as the JSON object vLLM returns, one parameter at a time as each closes:
`{"KEY": "VALUE"` … `, "N": 5` … `}`.

Malformed markup degrades as vLLM's state machine does where it can: text between and after
invokes inside a block is dropped, a parameter ends at the next parameter or at the invoke's end
when its close is missing, a key given twice keeps its first value (already streamed), and an
output cut short ends the open call with what it has. An invoke with an unknown or missing name
(not one of the request's tools, when it has tools) is text with its markup; so is a tag that opens
no block, and a block cut short before its first name.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gateway.core.conversation import Tool
from gateway.formats._schema_values import convert_arg_value, properties
from gateway.formats._shared import accepts_name
from gateway.formats.base import ItemKind, ParseEvent
from gateway.formats.hf.parser import HermesOutputParser, Markup

__all__ = ["InvokeToolCallParser", "Tags"]

MAX_TAG = 1024  # a tag longer than this (an endless name) is not markup
_WHITESPACE = " \t\r\n"

# States inside a block
_OPENING, _BETWEEN, _ARGS, _VALUE, _RAW = range(5)


@dataclass(frozen=True, slots=True)
class Tags:
    """A family's tags as the parser scans them (marked ids written as their `marks` characters).
    `block_open` None: the block opens on `opener` itself; else `opener` after a `<` may open one."""

    marks: dict[int, str]  # ids that are structure -> one private character each
    opener: int  # the id that opens (or may open) a block
    block_open: str | None
    block_close: str
    invoke_open: str  # up to the name, which ends at `">`
    invoke_close: str
    parameter_open: str
    parameter_close: str
    parameter: re.Pattern[str]  # a parameter's head: groups (key, string attribute or None)


class InvokeToolCallParser(HermesOutputParser):
    """Output ids in, reasoning / text / tool-call item events out; calls in blocks of
    `<invoke name=…>` with `<parameter …>` tags (`Tags`); values read by `value`."""

    def __init__(self, token_bytes: list[bytes], markup: Markup, tags: Tags, stop_ids: frozenset[int],
                 starts_in_reasoning: bool = False, tools: Iterable[Tool] = ()) -> None:
        tools = list(tools)
        self._names = frozenset(tool.name for tool in tools)
        self._schemas = {tool.name: properties(tool.parameters) for tool in tools}
        self._tags = tags
        self._block_close, self._invoke_open, self._invoke_close = tags.block_close, tags.invoke_open, tags.invoke_close
        self._parameter_close = tags.parameter_close
        self._value_ends = (tags.parameter_close, tags.parameter_open, tags.invoke_close, tags.block_close)
        self._tag_starts = ("<", *tags.marks.values())
        self._unmark = str.maketrans({char: markup.text[token_id].decode() for token_id, char in tags.marks.items()})
        super().__init__(token_bytes, markup, stop_ids, starts_in_reasoning)
        self._outer: ItemKind = "text"
        self._state = _OPENING
        self._buf = ""
        self._call_utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._reset_call()

    def finish(self) -> list[ParseEvent]:
        if self._mode == "tool_call":
            self._consume(final=True)
            self._advance()
        if self._mode == "tool_call":
            self._end_of_output()
        return super().finish()

    # HermesOutputParser hooks ----------------------------------------------------------------

    def _on_markup(self, token_id: int) -> None:
        tags = self._tags
        if self._mode == "tool_call":
            self._consume()
            self._buf += tags.marks.get(token_id) or self._markup.text[token_id].decode()
            self._advance()
        elif token_id == tags.opener and tags.block_open is None:
            self._close_segment()  # the text (or reasoning) before the block is complete
            self._mode, self._state, self._buf = "tool_call", _BETWEEN, ""
            self._call_utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        elif token_id == tags.opener and self._pending.endswith(b"<"):
            del self._pending[-1]
            super()._flush()
            self._outer, self._mode = self._mode, "tool_call"
            self._state, self._buf = _OPENING, "<" + tags.marks[token_id]
            self._call_utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        elif token_id in tags.marks:  # out of place: text
            self._pending += self._markup.text[token_id]
        else:
            super()._on_markup(token_id)

    def _flush(self, final: bool = False) -> None:
        if self._mode == "tool_call":
            self._consume()
            self._advance()
            return
        # A `<` that may open a block with the next token waits for it.
        hold = not final and self._tags.block_open is not None and self._pending.endswith(b"<")
        if hold:
            del self._pending[-1]
        super()._flush(final)
        if hold:
            self._pending += b"<"

    # The block ----------------------------------------------------------------------------------

    def _consume(self, final: bool = False) -> None:
        data = bytes(self._call)
        self._call.clear()
        if data or final:
            self._buf += self._call_utf8.decode(data, final)

    def _advance(self) -> None:
        """Reads what the buffer holds, as far as it is decided."""
        while self._mode == "tool_call" and self._step():
            pass

    def _step(self) -> bool:
        """One decision on the buffer; False when it needs more output."""
        buf = self._buf
        if self._state == _OPENING:
            block_open = self._tags.block_open or ""
            if buf.startswith(block_open):
                self._buf = buf[len(block_open):]
                self._mode = self._outer
                self._close_segment()  # the text (or reasoning) before the block is complete
                self._mode, self._state = "tool_call", _BETWEEN
                return True
            if not block_open.startswith(buf):
                self._back_to_text(buf)
            return False
        if self._state == _VALUE:
            return self._value()
        if self._state == _RAW:
            return self._raw_invoke()
        stripped = buf.lstrip(_WHITESPACE)
        if stripped != buf:
            self._buf = buf = stripped
        if not buf:
            return False
        if buf.startswith(self._block_close):
            self._close_call()
            self._end_block(buf[len(self._block_close):])
            return False
        if self._state == _ARGS:
            if buf.startswith(self._invoke_close):
                self._buf = buf[len(self._invoke_close):]
                self._close_call()
                self._state = _BETWEEN
                return True
            head = self._tags.parameter.match(buf)
            if head is not None:
                self._open_value(head[1], head[2] if head.re.groups > 1 else None)
                self._buf = buf[head.end():]
                return True
            opening = self._tags.parameter_open
            waiting = (opening.startswith(buf[:len(opening)])
                       and ">" not in buf and len(buf) < MAX_TAG)
        else:  # _BETWEEN
            if buf.startswith(self._invoke_open):
                end = buf.find('">', len(self._invoke_open))
                if end < 0:
                    if len(buf) < MAX_TAG:
                        return False
                    end = len(self._invoke_open)  # an endless name: not a call
                self._open_call(buf[len(self._invoke_open):end], buf[:end + 2])
                self._buf = buf[end + 2:]
                return True
            waiting = self._invoke_open.startswith(buf)
        if waiting or any(tag.startswith(buf) for tag in (self._block_close, self._invoke_close)):
            return False
        # Junk between tags is dropped, as vLLM drops it, up to what may start a tag.
        cut = min((i for i in (buf.find(c, 1) for c in self._tag_starts) if i > 0), default=-1)
        self._buf = buf[cut:] if cut > 0 else ""
        return cut > 0

    def _back_to_text(self, written: str) -> None:
        """A tag that opens no block (`<｜DSML｜…`): text of the item it interrupted."""
        self._mode = self._outer
        self._pending += (written.translate(self._unmark)).encode() + self._call_utf8.getstate()[0]
        self._buf = ""

    def _end_block(self, rest: str) -> None:
        self._mode, self._state, self._buf = "text", _OPENING, ""
        self._open_segment()
        self._pending += rest.translate(self._unmark).encode() + self._call_utf8.getstate()[0]

    def _end_of_output(self) -> None:
        if self._state == _OPENING:
            self._back_to_text(self._buf)
            return
        if self._state == _VALUE:
            self._close_value(self._buf)
        elif self._state == _RAW or (self._state == _BETWEEN and self._buf.startswith(self._invoke_open)):
            self._raw_text_item((self._raw + self._buf).translate(self._unmark).encode())
        self._close_call()
        self._mode, self._state, self._buf = "text", _OPENING, ""
        self._open_segment()

    # Calls ----------------------------------------------------------------------------------------

    def _reset_call(self) -> None:
        self._properties: dict[str, Any] = {}
        self._seen: set[str] = set()
        self._raw = ""
        self._key = ""
        self._is_string: str | None = None
        self._scanned = 0

    def _open_call(self, name: str, written: str) -> None:
        self._reset_call()
        if not accepts_name(name, self._names):
            self._raw, self._state = written, _RAW
            return
        self._start_object(name, self._schemas.get(name, {}))
        self._state = _ARGS

    def _raw_invoke(self) -> bool:
        """An invoke that is not a call: text up to its end (or the block's)."""
        end = self._buf.find(self._invoke_close)
        block_end = self._buf.find(self._block_close)
        if end < 0 and block_end < 0:
            return False
        if end >= 0 and (block_end < 0 or end < block_end):
            end += len(self._invoke_close)
        else:
            end = block_end
        self._raw_text_item((self._raw + self._buf[:end]).translate(self._unmark).encode())
        self._raw, self._buf, self._state = "", self._buf[end:], _BETWEEN
        return True

    def _open_value(self, key: str, is_string: str | None) -> None:
        self._key, self._is_string, self._scanned = key, is_string, 0
        self._state = _VALUE

    def _value(self) -> bool:
        buf = self._buf
        found = [(i, tag) for tag in self._value_ends if (i := buf.find(tag, self._scanned)) >= 0]
        if not found:
            self._scanned = max(0, len(buf) - max(map(len, self._value_ends)))
            return False
        end, tag = min(found)
        self._close_value(buf[:end])
        self._buf = buf[end + len(tag):] if tag == self._parameter_close else buf[end:]
        self._state = _ARGS
        return True

    def _close_value(self, written: str) -> None:
        if self._call_index is None or self._key in self._seen:
            return  # a key given twice keeps its first value (already streamed)
        value = self.value(written.translate(self._unmark), self._is_string)
        schema = self._properties.get(self._key)
        if isinstance(schema, dict) and not isinstance(value, dict | list):
            value = convert_arg_value(value if isinstance(value, str) else json.dumps(value), schema)
        self._seen.add(self._key)
        self._member(self._key, json.dumps(value, ensure_ascii=False))

    def value(self, text: str, is_string: str | None) -> Any:
        """A parameter's value from its text and its `string` attribute (None: none written), before the
        schema's conversion: vLLM's DSML reading (`string="true"`: the text, else JSON if it parses)."""
        if is_string == "true":
            return text
        try:
            return json.loads(text)
        except ValueError:
            return text

    def _close_call(self) -> None:
        if self._call_index is None:
            return
        self._end_object()
        self._reset_call()
