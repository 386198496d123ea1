"""DeepSeek-V3.2 and V4 tool calls (DSML): the streaming output parser.

These models write their calls as a DSML block after their text (V3.2 names it `function_calls`,
V4 `tool_calls`):

    <｜DSML｜tool_calls>
    <｜DSML｜invoke name="NAME">
    <｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter>
    <｜DSML｜parameter name="N" string="false">5</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls>

then end their turn with `<｜end▁of▁sentence｜>`; V4 (and V3.2 in thinking mode) reasons in
`<think>…</think>`, which are single added tokens. Of the DSML markup only `｜DSML｜` is one (id
128825 in V4's vocabulary); the brackets, names and attributes around it are ordinary text. So a
tag is structure only where the model wrote the `｜DSML｜` id in it: the parser carries that id as
one private character (`MARK`) through the text it scans, and the same letters written in text
pieces (how content is rendered back, or an argument that quotes DSML) stay text. A `<` just
before a `｜DSML｜` id may open a block, so text holds back a trailing `<` until the next token.

Values are read as vLLM's `deepseek_v32` / `deepseek_v4` parsers read them
(`vllm/parser/deepseek_v4.py` `_dsml_arg_converter`, then `ParserEngine._fix_arg_types`): a
`string="true"` value is its text, any other is JSON when it parses, else its text; then values
are converted by the tool's JSON schema as vLLM converts them (`glm.convert_arg_value`: a string
parameter keeps `5` as "5", an integer one makes "5" 5). Nested objects and arrays are not
converted further, and vLLM's unwrapping of a lone `arguments`/`input` wrapper is not done. The
arguments stream as the JSON object vLLM returns, one parameter at a time as each closes:
`{"KEY": "VALUE"` … `, "N": 5` … `}`.

Malformed markup degrades as vLLM's state machine does where it can: text between and after
invokes inside a block is dropped, a parameter ends at the next parameter or `</｜DSML｜invoke>` when
its close is missing, and an output cut short ends the open call with what it has. An invoke
with an unknown or missing name (not one of the request's tools, when it has tools) is text with
its markup; so is a `<｜DSML｜…>` that opens no block, and a block cut short before its first name.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable
from typing import Any

from gateway.core.conversation import Tool
from gateway.formats.base import ItemDelta, ItemDone, ItemKind, ParseEvent
from gateway.formats.dsml_render import BLOCKS, DSML
from gateway.formats.glm import convert_arg_value, is_valid_name
from gateway.formats.hf_parser import HermesOutputParser, Markup

# The `｜DSML｜` id inside scanned text: a noncharacter, so no text the model writes means it.
MARK = "\ufdd0"
MAX_TAG = 1024  # a tag longer than this (an endless name) is not markup
_PARAMETER = re.compile(f'<{MARK}parameter\\s+name="([^"]*)"(?:\\s+string="([^"]*)")?\\s*>')
_WHITESPACE = " \t\r\n"

# States inside a block
_OPENING, _BETWEEN, _ARGS, _VALUE, _RAW = range(5)


class DsmlToolCallParser(HermesOutputParser):
    """Output ids in, reasoning / text / tool-call item events out; calls in DSML. `markup.call_open`
    is the `｜DSML｜` id (`call_close` None); `version` "v32" or "v4" names the block."""

    def __init__(self, token_bytes: list[bytes], markup: Markup, version: str, stop_ids: frozenset[int],
                 starts_in_reasoning: bool = False, tools: Iterable[Tool] = ()) -> None:
        tools = list(tools)
        self._names = frozenset(tool.name for tool in tools)
        self._schemas = {tool.name: _properties(tool.parameters) for tool in tools}
        self._dsml = markup.call_open
        block = BLOCKS[version]
        self._block_open, self._block_close = f"<{MARK}{block}>", f"</{MARK}{block}>"
        self._invoke_open, self._invoke_close = f'<{MARK}invoke name="', f"</{MARK}invoke>"
        self._parameter_open, self._parameter_close = f"<{MARK}parameter", f"</{MARK}parameter>"
        self._value_ends = (self._parameter_close, self._parameter_open, self._invoke_close, self._block_close)
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
        if self._mode == "tool_call":
            self._consume()
            self._buf += MARK if token_id == self._dsml else self._markup.text[token_id].decode()
            self._advance()
        elif token_id == self._dsml and self._pending.endswith(b"<"):
            del self._pending[-1]
            super()._flush()
            self._outer, self._mode = self._mode, "tool_call"
            self._state, self._buf = _OPENING, "<" + MARK
            self._call_utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        elif token_id == self._dsml:
            self._pending += DSML.encode()
        else:
            super()._on_markup(token_id)

    def _flush(self, final: bool = False) -> None:
        if self._mode == "tool_call":
            self._consume()
            self._advance()
            return
        hold = not final and self._pending.endswith(b"<")  # it may open a block with the next token
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
            if buf.startswith(self._block_open):
                self._buf = buf[len(self._block_open):]
                self._mode = self._outer
                self._close_segment()  # the text (or reasoning) before the block is complete
                self._mode, self._state = "tool_call", _BETWEEN
                return True
            if not self._block_open.startswith(buf):
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
            head = _PARAMETER.match(buf)
            if head is not None:
                self._open_value(head[1], head[2])
                self._buf = buf[head.end():]
                return True
            waiting = (self._parameter_open.startswith(buf[:len(self._parameter_open)])
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
        cut = buf.find("<", 1)  # junk between tags is dropped, as vLLM drops it
        self._buf = buf[cut:] if cut > 0 else ""
        return cut > 0

    def _back_to_text(self, written: str) -> None:
        """`<｜DSML｜…` that opens no block: text of the item it interrupted."""
        self._mode = self._outer
        self._pending += (written.replace(MARK, DSML)).encode() + self._call_utf8.getstate()[0]
        self._buf = ""

    def _end_block(self, rest: str) -> None:
        self._mode, self._state, self._buf = "text", _OPENING, ""
        self._open_segment()
        self._pending += rest.replace(MARK, DSML).encode() + self._call_utf8.getstate()[0]

    def _end_of_output(self) -> None:
        if self._state == _OPENING:
            self._back_to_text(self._buf)
            return
        if self._state == _VALUE:
            self._close_value(self._buf)
        elif self._state == _RAW or (self._state == _BETWEEN and self._buf.startswith(self._invoke_open)):
            self._raw_text_item((self._raw + self._buf).replace(MARK, DSML).encode())
        self._close_call()
        self._mode, self._state, self._buf = "text", _OPENING, ""
        self._open_segment()

    # Calls ----------------------------------------------------------------------------------------

    def _reset_call(self) -> None:
        self._call_index: int | None = None
        self._properties: dict[str, Any] = {}
        self._arguments: list[str] = []
        self._seen: set[str] = set()
        self._raw = ""
        self._key = ""
        self._is_string: str | None = None
        self._scanned = 0

    def _open_call(self, name: str, written: str) -> None:
        self._reset_call()
        if not is_valid_name(name) or (self._names and name not in self._names):
            self._raw, self._state = written, _RAW
            return
        self._properties = self._schemas.get(name, {})
        self._call_index = self._start("tool_call", name)
        self._emit("{")
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
        self._raw_text_item((self._raw + self._buf[:end]).replace(MARK, DSML).encode())
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
        text = written.replace(MARK, DSML)
        if self._call_index is None or self._key in self._seen:
            return  # a key given twice keeps its first value (already streamed)
        value: Any = text
        if self._is_string != "true":
            try:
                value = json.loads(text)
            except ValueError:
                value = text
        schema = self._properties.get(self._key)
        if isinstance(schema, dict) and not isinstance(value, dict | list):
            value = convert_arg_value(value if isinstance(value, str) else json.dumps(value), schema)
        separator = ", " if self._seen else ""
        self._seen.add(self._key)
        self._emit(f"{separator}{json.dumps(self._key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}")

    def _close_call(self) -> None:
        if self._call_index is None:
            return
        self._emit("}")
        self._events.append(ItemDone(self._call_index, "".join(self._arguments)))
        self._reset_call()

    def _emit(self, text: str) -> None:
        assert self._call_index is not None
        self._arguments.append(text)
        self._events.append(ItemDelta(self._call_index, text))


def _properties(parameters: dict[str, Any]) -> dict[str, Any]:
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    return properties if isinstance(properties, dict) else {}
