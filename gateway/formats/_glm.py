"""GLM-4.5/4.6/4.7 (and GLM-5, same markup) tool calls: the output parser and the render-side shapes.

GLM writes a call as

    <tool_call>NAME
    <arg_key>KEY</arg_key>
    <arg_value>VALUE</arg_value>
    </tool_call>

(GLM-4.7 and later without the newlines; several blocks in a row are parallel calls), reasons in
`<think>…</think>`, and ends its turn on the token that opens the next message: `<|observation|>`
before tool results, `<|user|>` after an answer (or `<|endoftext|>`). Every tag is a single added
token, so the parser switches state on ids, as `hf.parser` does for `<think>` and `<tool_call>`:
a tag spelled out in text pieces (inside a value, say) is text. vLLM's `glm45`/`glm47` parsers
(`vllm/parser/glm47_moe.py`) match the same tags as text instead; for the ids GLM itself writes
the two agree.

A name is accepted as vLLM accepts it (`validate_tool_names`: one of the request's tools when it
has tools, otherwise any name without markup characters); a block with another name, or none,
is text. Values are converted by the tool's JSON schema exactly as vLLM 0.32 converts GLM's
(`ParserEngine._fix_arg_types` → `tool_parsers/utils.py` `coerce_to_schema_type`: null > integer >
number > boolean > object > array > string, the first that fits; then any JSON; else the text),
and stream as the JSON object vLLM returns (`json.dumps(arguments, ensure_ascii=False)`). A value
that can only be a string streams as it is written; a typed one comes out whole at its
`</arg_value>`. Two repairs a streaming parser must make by rule where vLLM sees the whole output:
an `<arg_key>` inside an unclosed value ends the value, and a key given twice keeps its first value
(vLLM keeps the last; the first is already streamed).

Rendering: the templates iterate `tool_call.arguments.items()`, so calls reach them with their
arguments as a dict. System and developer messages render in place (`<|system|>`), as the
template allows anywhere.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterable
from typing import Any

from gateway.core.conversation import Tool
from gateway.formats._call_section import CallSectionParser
from gateway.formats._family import Family, ParserFactory, Turns
from gateway.formats._schema_values import convert_arg_value, is_text, properties
from gateway.formats._shared import MAX_NAME, accepts_name, with_argument_dicts
from gateway.formats.hf.parser import Markup

__all__ = ["FAMILY"]

ARG_TOKENS = ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
TEMPLATE_MARKER = "<arg_key>"
# The model's stop tokens besides eos: each opens the message that follows its turn.
STOP_TOKENS = ("<|user|>", "<|observation|>", "<|endoftext|>")
# Tokens that open a message. A rendered assistant turn ends where the next one opens, so these
# count turns for the exact-token splice (the model's own stop token is one of them).
TURN_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")
# States of a call body
_NAME, _KEY, _AFTER_KEY, _VALUE, _SKIP, _BETWEEN, _RAW = range(7)


class GlmToolCallParser(CallSectionParser):
    """Output ids in, reasoning / text / tool-call item events out; tool calls in GLM's markup.
    `args` are the ids of `<arg_key>`, `</arg_key>`, `<arg_value>`, `</arg_value>` (also in
    `markup.text`, so that out of a call they are text)."""

    def __init__(self, token_bytes: list[bytes], markup: Markup, args: tuple[int, int, int, int],
                 stop_ids: frozenset[int], starts_in_reasoning: bool = False, tools: Iterable[Tool] = ()) -> None:
        tools = list(tools)
        self._schemas = {tool.name: properties(tool.parameters) for tool in tools}
        self._names = frozenset(self._schemas)
        self._key_open, self._key_close, self._value_open, self._value_close = args
        super().__init__(token_bytes, markup, stop_ids, starts_in_reasoning)
        self._reset_call()

    # CallSectionParser hooks -----------------------------------------------------------------

    def _finish_section(self) -> None:
        self._consume()
        if self._state in (_NAME, _RAW):
            self._raw_text_item(self._markup.text[self._markup.call_open] + bytes(self._raw))
        else:
            self._close_call()

    def _section_markup(self, token_id: int) -> None:
        if token_id == self._markup.call_close:
            self._end_call()
            return
        self._raw += self._markup.text[token_id]
        if self._state == _RAW:
            return
        if token_id == self._key_open:
            self._on_key_open()
        elif token_id == self._key_close and self._state == _KEY:
            self._state = _AFTER_KEY
        elif token_id == self._value_open and self._state in (_AFTER_KEY, _BETWEEN, _KEY):
            self._open_value()
        elif token_id == self._value_close and self._state in (_VALUE, _SKIP):
            if self._state == _VALUE:
                self._close_value()
            self._state = _BETWEEN
        elif self._state == _NAME:
            self._state = _RAW  # markup before any argument: not a call
        elif self._state == _VALUE:
            self._value_text(self._markup.text[token_id].decode())  # a stray tag inside a value is value

    def _end_call(self) -> None:
        if self._state == _NAME:
            self._decide_name()
        if self._state == _RAW:
            markup = self._markup
            self._raw_text_item(markup.text[markup.call_open] + bytes(self._raw) + markup.text[markup.call_close])
        else:
            self._close_call()
        self._section_closed()

    # The call body ------------------------------------------------------------------------------

    def _reset_call(self) -> None:
        self._state = _NAME
        self._raw = bytearray()  # the whole body as written, for a block that turns out to be text
        self._name = bytearray()
        self._key = bytearray()
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._properties: dict[str, Any] = {}
        self._seen: set[str] = set()
        self._param: str | None = None
        self._streams = False
        self._value: list[str] = []

    def _read(self, data: bytes) -> None:
        self._raw += data
        if self._state == _NAME:
            self._name += data
            if len(self._name) > 4 * MAX_NAME:
                self._state = _RAW
        elif self._state == _KEY:
            self._key += data
        elif self._state == _VALUE:
            self._value_text(self._utf8.decode(data))
        # _AFTER_KEY, _SKIP, _BETWEEN: separators (or junk) between tags, skipped as vLLM skips them

    def _decide_name(self) -> None:
        name = self._name.decode("utf-8", errors="replace").strip()
        if not accepts_name(name, self._names):
            self._state = _RAW
            return
        self._start_object(name, self._schemas.get(name, {}))
        self._state = _BETWEEN

    def _on_key_open(self) -> None:
        if self._state == _NAME:
            self._decide_name()
            if self._state == _RAW:
                return
        elif self._state == _VALUE:
            self._close_value()  # the model left the value unclosed
        self._key.clear()
        self._state = _KEY

    def _open_value(self) -> None:
        key = self._key.decode("utf-8", errors="replace").strip() if self._state != _BETWEEN else ""
        self._key.clear()
        if not key or key in self._seen:
            self._state = _SKIP
            return
        self._seen.add(key)
        self._param = key
        self._streams = is_text(self._properties.get(key))
        self._value = []
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._member(key, '"' if self._streams else "")
        self._state = _VALUE

    def _value_text(self, text: str) -> None:
        if not text:
            return
        if self._streams:
            self._emit(json.dumps(text, ensure_ascii=False)[1:-1])
        else:
            self._value.append(text)

    def _close_value(self) -> None:
        self._value_text(self._utf8.decode(b"", final=True))
        self._state = _BETWEEN
        if self._streams:
            self._emit('"')
            return
        assert self._param is not None
        value = convert_arg_value("".join(self._value), self._properties.get(self._param))
        self._emit(json.dumps(value, ensure_ascii=False))

    def _close_call(self) -> None:
        """`</tool_call>` or the end of output: an open value ends, a half-written key is dropped."""
        if self._call_index is None:
            return
        if self._state == _VALUE:
            self._close_value()
        self._end_object()
        self._state = _BETWEEN


# Rendering ------------------------------------------------------------------------------------

def _parsers(vocab: dict[str, int]) -> ParserFactory:
    arg_ids = tuple(vocab[t] for t in ARG_TOKENS)
    return lambda shared, starts, tools: GlmToolCallParser(shared.token_bytes, shared.markup, arg_ids,
                                                           shared.stop_ids, starts, tools)


# GLM ends a turn on the token that opens the next message; its template's turns hold whichever parser reads.
FAMILY = Family(
    name="glm", tool_parsers=("glm45", "glm47"), reasoning_parsers=("glm45", "glm47"),
    detect=lambda template: TEMPLATE_MARKER in template, markup=ARG_TOKENS, needs=(*ARG_TOKENS, *TURN_TOKENS),
    turns=Turns(stops=STOP_TOKENS, terminators=TURN_TOKENS, openers=TURN_TOKENS, stops_close_turns=False),
    prepare=with_argument_dicts, parsers=_parsers)
