"""DeepSeek-V3.1 (and V3.1-Terminus) tool calls: the streaming output parser and the family's tokens.

DeepSeek-V3.1 writes its calls as one section of calls, each a name and its JSON arguments:

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{"a": 1}<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>

then ends its turn with `<｜end▁of▁sentence｜>` (eos). It reasons in `<think>…</think>` when the
template's `thinking` switch opens `<think>` at the generation prompt, and otherwise starts after a
`</think>` the prompt wrote. Every marker is a single added token, so the parser switches state on
ids, as `hf_parser` does for `<think>` and `<tool_call>`: a marker spelled out in text pieces (an
argument string that quotes one, say) is text.

vLLM's `deepseek_v31` parser (`tool_parsers/deepseekv31_tool_parser.py`) takes the name and the
arguments exactly as written, between the same markers; so does this parser, which streams the
arguments as they arrive. A name is accepted as the GLM parser accepts one (one of the request's
tools when it has tools, otherwise any name without markup characters); a call with another name,
or none, is text with its markers. A call cut short (the section or the output ends inside it)
keeps the arguments written so far; text between calls is dropped, as vLLM's regex drops it.
Kimi-K2 writes its calls in the same layout with other tokens and another head (`kimi`
overrides `call_head`).

Text items keep the model's text as written (no newline belongs to DeepSeek's markup), so a call
the model wrote renders back to its ids: the template inlines `content`, then the calls'
`arguments` strings verbatim.

Rendering needs nothing of this module: the template reads `hf_messages`' shapes as they are. Its
system prompt is every system message joined at the top, tool results follow the call turn with no
`<｜Assistant｜>`, and an assistant turn's reasoning is never rendered (the template writes `</think>`
in its place): the exact-token splice keeps the model's own reasoning ids where the client's
history has them.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable

from gateway.core.conversation import Tool
from gateway.formats.base import ItemDelta, ItemDone
from gateway.formats.call_section import CallSectionParser
from gateway.formats.family import Family, ParserFactory
from gateway.formats.hf_parser import Markup
from gateway.formats.shared import is_valid_name

__all__ = ["FAMILY", "DeepSeekToolCallParser"]

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
# The per-call markers: inside a section they structure it, anywhere else they are text.
CALL_TOKENS = (CALL_BEGIN, CALL_END, SEP)
TEMPLATE_MARKER = CALLS_BEGIN

# States of a calls section
_BETWEEN, _NAME, _ARGS, _RAW = range(4)


class DeepSeekToolCallParser(CallSectionParser):
    """Output ids in, reasoning / text / tool-call item events out; calls in DeepSeek-V3.1's markup.
    `markup.call_open`/`call_close` are the section's markers; `calls` are the ids of
    `<｜tool▁call▁begin｜>`, `<｜tool▁call▁end｜>` and `<｜tool▁sep｜>` (also in `markup.text`)."""

    trim_newlines = False  # no newline is DeepSeek's markup: text items are the model's text

    def __init__(self, token_bytes: list[bytes], markup: Markup, calls: tuple[int, int, int],
                 stop_ids: frozenset[int], starts_in_reasoning: bool = False, tools: Iterable[Tool] = ()) -> None:
        self._names = frozenset(tool.name for tool in tools)
        self._call_begin, self._call_end, self._sep = calls
        super().__init__(token_bytes, markup, stop_ids, starts_in_reasoning)
        self._state = _BETWEEN
        self._reset_call()

    # CallSectionParser hooks -----------------------------------------------------------------

    def _finish_section(self) -> None:
        self._end_section()
        self._close_segment()

    def _section_opened(self) -> None:
        self._state = _BETWEEN

    def _section_markup(self, token_id: int) -> None:
        if token_id == self._markup.call_close:
            self._end_section()
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
            self._arguments_text(self._markup.text[token_id].decode())  # a stray marker inside arguments
        elif self._state in (_NAME, _RAW):
            self._raw += self._markup.text[token_id]
            self._state = _RAW
        # _BETWEEN: a stray marker between calls is dropped with the rest of the junk there

    # The section and its calls -----------------------------------------------------------------

    def _reset_call(self) -> None:
        self._raw = bytearray(self._markup.text.get(self._call_begin, b""))  # the call as written
        self._name = bytearray()
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._call_index: int | None = None
        self._arguments: list[str] = []

    def _consume(self) -> None:
        data = bytes(self._call)
        self._call.clear()
        if not data:
            return
        if self._state in (_NAME, _RAW):
            self._raw += data
            self._name += data
        elif self._state == _ARGS:
            self._arguments_text(self._utf8.decode(data))
        # _BETWEEN: text between calls, dropped

    def _decide_name(self) -> None:
        self._raw += self._markup.text[self._sep]
        head = self.call_head(self._name.decode("utf-8", errors="replace"))
        if head is None:
            self._state = _RAW
            return
        name, call_id = head
        self._call_index = self._start("tool_call", name, call_id)
        self._state = _ARGS

    def call_head(self, head: str) -> tuple[str, str | None] | None:
        """The tool name and the call's own id (None: the gateway gives it one) from what the model
        wrote before the arguments; None when that is not a call of this request."""
        if not is_valid_name(head) or (self._names and head not in self._names):
            return None
        return head, None

    def _arguments_text(self, text: str) -> None:
        if text:
            assert self._call_index is not None
            self._arguments.append(text)
            self._events.append(ItemDelta(self._call_index, text))

    def _close_call(self) -> None:
        assert self._call_index is not None
        self._arguments_text(self._utf8.decode(b"", final=True))
        self._events.append(ItemDone(self._call_index, "".join(self._arguments)))
        self._call_index = None

    def _raw_call(self) -> None:
        self._raw_text_item(bytes(self._raw))

    def _end_section(self) -> None:
        """`<｜tool▁calls▁end｜>` or the end of output: an open call ends with what it has."""
        self._consume()
        if self._state == _ARGS:
            self._close_call()
        elif self._state in (_NAME, _RAW):
            self._raw_call()
        self._reset_call()
        self._state = _BETWEEN
        self._mode = "text"
        self._open_segment()


def _parsers(vocab: dict[str, int]) -> ParserFactory:
    call_ids = tuple(vocab[t] for t in CALL_TOKENS)
    return lambda shared, starts, tools: DeepSeekToolCallParser(shared.token_bytes, shared.markup, call_ids,
                                                                shared.stop_ids, starts, tools)


# The section's markers open and close calls; the per-call markers are markup in a section, else text.
FAMILY = Family(
    name="deepseek", tool_parsers=("deepseek_v31",), reasoning_parsers=("deepseek_v3", "deepseek_r1"),
    detect=lambda template: TEMPLATE_MARKER in template,
    markers={"call_open": CALLS_BEGIN, "call_close": CALLS_END}, markup=CALL_TOKENS,
    needs=(CALLS_BEGIN, CALLS_END, *CALL_TOKENS), parsers=_parsers)
