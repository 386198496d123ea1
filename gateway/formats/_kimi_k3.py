"""Kimi-K3 (XTML): every structure a tag spelled with three control tokens, read on their ids.

Kimi-K3 writes a tag as `<|open|>NAME ATTRS<|sep|>` … `<|close|>NAME<|sep|>`: `<|open|>`, `<|close|>`
and `<|sep|>` are control tokens, the name and its attributes (`key="value"`, `&` and `"` escaped)
ordinary text. After its generation prompt (`<|open|>message role="assistant"<|sep|>` and
`<|open|>think<|sep|>`, or `<|open|>response<|sep|>` with the template's `thinking` off) a turn is

    REASONING<|close|>think<|sep|><|open|>response<|sep|>TEXT<|close|>response<|sep|>
    <|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|>
    <|open|>argument key="K" type="string"<|sep|>RAW<|close|>argument<|sep|>…<|close|>call<|sep|>…
    <|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>

with no newlines of markup. An argument's value is its raw text when its type is "string" and JSON
otherwise (JSON that does not parse stays the text), as vLLM's `kimi_k3` parser reads it
(`tool_parsers/kimi_k3_tool_parser.py`); the arguments are then one JSON object (`json.dumps`, as vLLM
writes them). The template writes a call whose arguments are a string as one `json` block, so
`prepare` hands it the arguments as a mapping (vLLM's chat parsing does the same), and each becomes an
argument tag again; a `json` block the model writes is read as the call's arguments.

The parser switches on the three ids and reads the tag's name between them, so a tag typed as text
(an argument spelling `<|close|>argument<|sep|>`) stays text, where vLLM's regexes over the decoded
text end the value there. A call is one item when its `<|close|>call<|sep|>` arrives (vLLM's streaming
parser emits it then too); a call naming no tool of the request, a tag out of place in a call, and a
call the output ends inside are text with their markup; text between calls is dropped, as vLLM's
regex drops it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from gateway.core.conversation import Tool
from gateway.formats._family import Family, ParserFactory, Turns
from gateway.formats._shared import accepts_name, with_argument_dicts
from gateway.formats.base import ItemDelta, ItemDone, ParseEvent
from gateway.formats.hf.parser import HermesOutputParser, Markup

__all__ = ["FAMILY", "KimiK3Parser"]

OPEN, CLOSE, SEP = "<|open|>", "<|close|>", "<|sep|>"
END = "<|end_of_msg|>"
IMAGE = "<|kimi_image_placeholder|>"
_HEAD = re.compile(r"\s*(\w+)((?:\s+\w+=\"[^\"]*\")*)\s*")
_ATTR = re.compile(r'(\w+)="([^"]*)"')


def _attrs(text: str) -> dict[str, str]:
    return {key: value.replace("&quot;", '"').replace("&amp;", "&") for key, value in _ATTR.findall(text)}


class KimiK3Parser(HermesOutputParser):
    """Output ids in, reasoning / text / tool-call item events out, from Kimi-K3's tags (see the module
    docstring). Mode "tool_call" is the tools channel."""

    trim_newlines = False  # no newline is K3's markup: items are the model's text as written

    def __init__(self, token_bytes: list[bytes], markup: Markup, tags: tuple[int, int, int],
                 stop_ids: frozenset[int], starts_in_reasoning: bool = False, tools: Iterable[Tool] = ()) -> None:
        self._names = frozenset(tool.name for tool in tools)
        self._open_id, self._close_id, self._sep_id = tags
        super().__init__(token_bytes, markup, stop_ids, starts_in_reasoning)
        self._tag: bytearray | None = None  # a tag's name and attributes, read up to its `<|sep|>`
        self._closing = False  # the tag being read is a `<|close|>` one
        self._call: bytearray = bytearray()  # an open call as written (its text if it is no call)
        self._call_name: str | None = None  # the open call's tool (None: no call open)
        self._call_ok = True
        self._arguments: dict[str, Any] = {}
        self._field: tuple[str, str] | None = None  # the open argument's (key, type), or ("", "json")
        self._value = bytearray()

    def feed(self, token_ids: Sequence[int]) -> list[ParseEvent]:
        table, size = self._bytes, len(self._bytes)
        for token_id in token_ids:
            if self._mode == "reasoning":
                self.reasoning_tokens += 1
            if token_id == self._open_id or token_id == self._close_id:
                self._begin_tag(token_id)
            elif token_id == self._sep_id:
                self._end_tag()
            elif token_id in self._stop_ids or not 0 <= token_id < size:
                continue
            elif self._tag is not None:
                self._tag += table[token_id]
            else:
                self._write(table[token_id])
        self._flush()
        return self._take_events()

    def finish(self) -> list[ParseEvent]:
        if self._tag is not None:
            self._write(self._tag_text())
            self._tag = None
        if self._mode == "tool_call":
            if self._call_name is not None:
                self._raw_text_item(bytes(self._call))
                self._call_name = None
            self._mode = "text"
            self._open_segment()
        self._close_segment()
        return self._take_events()

    # Tags -----------------------------------------------------------------------------------

    def _begin_tag(self, token_id: int) -> None:
        if self._tag is not None:  # a tag never finished: what it spelled is text
            self._write(self._tag_text())
        self._tag, self._closing = bytearray(), token_id == self._close_id

    def _tag_text(self) -> bytes:
        assert self._tag is not None
        marker = self._markup.text[self._close_id if self._closing else self._open_id]
        return marker + bytes(self._tag)

    def _end_tag(self) -> None:
        if self._tag is None:
            self._write(self._markup.text[self._sep_id])
            return
        raw = self._tag_text() + self._markup.text[self._sep_id]
        head = _HEAD.fullmatch(self._tag.decode("utf-8", errors="replace"))
        self._tag = None
        name, attrs = (head[1], head[2]) if head else ("", "")
        if not (self._close(name) if self._closing else self._open(name, attrs)):
            self._write(raw)  # out of place: text
        elif self._call_name is not None:
            self._call += raw

    def _open(self, name: str, attrs: str) -> bool:
        """An open tag: whether it is markup where it stands."""
        if self._mode == "text":
            if name == "think":
                self._switch("reasoning")
            elif name == "tools":
                self._close_segment()
                self._mode = "tool_call"
            return name in ("think", "response", "tools")
        if self._mode != "tool_call" or self._field is not None:
            return False
        values = _attrs(attrs)
        if self._call_name is None:
            if name == "call":
                self._call_name, self._call_ok, self._arguments = values.get("tool", ""), True, {}
                self._call.clear()
            return name == "call"
        if name == "argument" and "key" in values:
            self._field = (values["key"], values.get("type", "string"))
        elif name == "json":
            self._field = ("", "json")
        else:
            self._call_ok = False  # junk inside a call: the call is text
        self._value.clear()
        return True

    def _close(self, name: str) -> bool:
        """A close tag: whether it is markup where it stands."""
        if self._mode == "reasoning":
            if name == "think":
                self._switch("text")
            return name == "think"
        if self._mode == "text":
            return name in ("response", "message")
        if self._field is not None:
            if name == ("json" if self._field[1] == "json" else "argument"):
                self._end_field()
                return True
            return False
        if self._call_name is not None:
            if name == "call":
                self._end_call()
            else:
                self._call_ok = False
            return True
        if name in ("tools", "message"):
            self._mode = "text"
            self._open_segment()
        return True  # between calls, stray markup is dropped with the text there

    def _write(self, data: bytes) -> None:
        """Bytes of the model's text where they stand: in a segment, an argument's value, a call as
        written (its text if it is no call), or nowhere (between calls)."""
        if self._mode != "tool_call":
            self._pending += data
            return
        if self._field is not None:
            self._value += data
        if self._call_name is not None:
            self._call += data

    # Calls -----------------------------------------------------------------------------------

    def _end_field(self) -> None:
        assert self._field is not None
        key, kind = self._field
        self._field = None
        text = self._value.decode("utf-8", errors="replace")
        if kind == "json":
            try:
                value = json.loads(text)
            except ValueError:
                value = None
            if isinstance(value, dict):
                self._arguments.update(value)
            else:
                self._call_ok = False
        elif kind == "string":
            self._arguments[key] = text
        else:
            try:
                self._arguments[key] = json.loads(text)
            except ValueError:
                self._arguments[key] = text

    def _end_call(self) -> None:
        name, self._call_name = self._call_name or "", None
        if not self._call_ok or not accepts_name(name, self._names):
            self._raw_text_item(bytes(self._call) + self._markup.text[self._close_id] + b"call"
                                + self._markup.text[self._sep_id])
            return
        arguments = json.dumps(self._arguments, ensure_ascii=False)
        index = self._start("tool_call", name)
        self._events += [ItemDelta(index, arguments), ItemDone(index, arguments)]


def _parsers(vocab: dict[str, int]) -> ParserFactory:
    tags = (vocab[OPEN], vocab[CLOSE], vocab[SEP])
    return lambda shared, starts, tools: KimiK3Parser(shared.token_bytes, shared.markup, tags, shared.stop_ids,
                                                      starts, tools)


FAMILY = Family(
    name="kimi_k3", tool_parsers=("kimi_k3",), reasoning_parsers=("kimi_k3",),
    detect=lambda template: OPEN in template and END in template,
    markers={"think_open": None, "think_close": None, "call_open": None, "call_close": None},
    markup=(OPEN, CLOSE, SEP), needs=(OPEN, CLOSE, SEP, END), turns=Turns(stops=(END,), terminators=(END,)),
    prepare=with_argument_dicts, parsers=_parsers, image=IMAGE, thinking_switch="thinking",
    opens_reasoning=lambda prompt: prompt.endswith(f"{OPEN}think{SEP}"))
