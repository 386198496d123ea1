"""A section of tool calls, each a head and its JSON arguments between per-call markers: the
layout DeepSeek-V3.1 (`deepseek`) and Kimi-K2 (`kimi`) write with their own tokens and heads.

    SECTION_BEGIN CALL_BEGIN HEAD SEP {"a": 1} CALL_END … SECTION_END

Every marker is a single added token, so the parser switches state on ids, as `hf.parser` does for
`<think>` and `<tool_call>`: a marker spelled out in text pieces (an argument string that quotes
one, say) is text. The arguments are taken exactly as written (as vLLM's `deepseek_v31` and
`kimi_k2` parsers take them) and stream as they arrive. A head the family does not accept
(`call_head`), or none, makes the call text with its markers. A call cut short (the section or the
output ends inside it) keeps the arguments written so far; text between calls is dropped, as vLLM's
regex drops it.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable

from gateway.core.conversation import Tool
from gateway.formats._call_section import CallSectionParser
from gateway.formats.hf.parser import Markup

__all__ = ["HeadedCallsParser"]

# States of a calls section
_BETWEEN, _NAME, _ARGS, _RAW = range(4)


class HeadedCallsParser(CallSectionParser):
    """Output ids in, reasoning / text / tool-call item events out; calls in a section of headed
    calls. `markup.call_open`/`call_close` are the section's markers; `calls` are the ids of the
    call's begin, end and separator markers (also in `markup.text`). A family says what a head
    is (`call_head`)."""

    trim_newlines = False  # no newline is this markup's: text items are the model's text

    def __init__(self, token_bytes: list[bytes], markup: Markup, calls: tuple[int, int, int],
                 stop_ids: frozenset[int], starts_in_reasoning: bool = False, tools: Iterable[Tool] = ()) -> None:
        self._names = frozenset(tool.name for tool in tools)
        self._call_begin, self._call_end, self._sep = calls
        super().__init__(token_bytes, markup, stop_ids, starts_in_reasoning)
        self._state = _BETWEEN
        self._reset_call()

    # CallSectionParser hooks -----------------------------------------------------------------

    def _section_opened(self) -> None:
        self._state = _BETWEEN

    def _section_markup(self, token_id: int) -> None:
        if token_id == self._markup.call_close:
            self._finish_section()
            self._section_closed()
        elif token_id == self._call_begin and self._state != _ARGS:
            if self._state in (_NAME, _RAW):
                self._raw_call()  # the last one never reached its arguments
            self._reset_call()
            self._state = _NAME
        elif token_id == self._sep and self._state == _NAME:
            self._decide_name()
        elif token_id == self._call_end and self._state in (_ARGS, _NAME, _RAW):
            self._raw += self._markup.text[token_id]
            if self._state == _ARGS:
                self._close_call()
            else:
                self._raw_call()
            self._state = _BETWEEN
        elif self._state == _ARGS:
            self._emit(self._markup.text[token_id].decode())  # a stray marker inside arguments
        elif self._state in (_NAME, _RAW):
            self._raw += self._markup.text[token_id]
            self._state = _RAW
        # _BETWEEN: a stray marker between calls is dropped with the rest of the junk there

    # The section and its calls -----------------------------------------------------------------

    def _reset_call(self) -> None:
        self._raw = bytearray(self._markup.text.get(self._call_begin, b""))  # the call as written
        self._name = bytearray()
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _read(self, data: bytes) -> None:
        if self._state in (_NAME, _RAW):
            self._raw += data
            self._name += data
        elif self._state == _ARGS:
            self._emit(self._utf8.decode(data))
        # _BETWEEN: text between calls, dropped

    def _decide_name(self) -> None:
        self._raw += self._markup.text[self._sep]
        head = self.call_head(self._name.decode("utf-8", errors="replace"))
        if head is None:
            self._state = _RAW
            return
        self._start_call(*head)
        self._state = _ARGS

    def call_head(self, head: str) -> tuple[str, str | None] | None:
        """The tool name and the call's own id (None: the gateway gives it one) from what the model
        wrote before the arguments; None when that is not a call of this request."""
        raise NotImplementedError

    def _close_call(self) -> None:
        self._emit(self._utf8.decode(b"", final=True))
        self._end_arguments()

    def _raw_call(self) -> None:
        self._raw_text_item(bytes(self._raw))

    def _finish_section(self) -> None:
        """The section's closing marker or the end of output: an open call ends with what it has."""
        self._consume()
        if self._state == _ARGS:
            self._close_call()
        elif self._state in (_NAME, _RAW):
            self._raw_call()
        self._reset_call()
        self._state = _BETWEEN
