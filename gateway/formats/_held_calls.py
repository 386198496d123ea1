"""Tool calls as the whole answer, with no marker token to switch on: an output that starts like
calls is held to its end and read whole. Llama 3's JSON calls (`llama3_json`), xLAM's and
Phi-4-mini's JSON lists (`json_list`) and the pythonic lists of Llama 4 and Llama 3.2 (`pythonic`)
each say what opens their calls and how a held output reads.

As vLLM's parsers for these families decide, an output is calls when it starts (after whitespace)
with the family's opener, or with its optional tag (`<|python_tag|>`), and text otherwise. A held
output that is not all calls is text, as written (a JSON answer, a call cut short by the length
limit); a text output streams as it comes.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.core.conversation import Tool
from gateway.formats.base import ParseEvent
from gateway.formats.hf.parser import HermesOutputParser, Markup

__all__ = ["HeldCallsParser"]

_WHITESPACE = b" \t\r\n"


class HeldCallsParser(HermesOutputParser):
    """Output ids in, text / tool-call item events out; `markup.call_open` is the optional tag's id
    (None when the family or the vocabulary has none). The `tool_call` mode holds an output that may
    be calls; a family says what starts one (`opener`) and how it reads (`read_calls`)."""

    trim_newlines = False  # this markup owns no newline: text items are the model's text
    opener = b"{"  # what an output of calls starts with (after whitespace)

    def __init__(self, token_bytes: list[bytes], markup: Markup, stop_ids: frozenset[int],
                 tools: Iterable[Tool] = ()) -> None:
        self._names = frozenset(tool.name for tool in tools)
        self._decided = False  # whether the output is known to be text or held as calls
        self._tagged = False
        super().__init__(token_bytes, markup, stop_ids, starts_in_reasoning=False)

    def finish(self) -> list[ParseEvent]:
        if self._mode != "tool_call":
            return super().finish()
        self._calls(bytes(self._call))
        self._mode = "text"
        self._open_segment()
        return self._take_events()

    def _on_markup(self, token_id: int) -> None:
        if not self._decided and token_id == self._markup.call_open and not self._pending.strip(_WHITESPACE):
            self._decided = self._tagged = True
            self._pending.clear()
            self._mode = "tool_call"
            return
        self._decided = True
        if self._mode == "tool_call":
            self._call += self._markup.text[token_id]
        else:
            self._pending += self._markup.text[token_id]  # a marker out of place is just text

    def _flush(self, final: bool = False) -> None:
        if not self._decided and self._mode == "text":
            start = self._pending.lstrip(_WHITESPACE)
            if not final and (not start or (len(start) < len(self.opener) and self.opener.startswith(start))):
                return  # only whitespace, or the opener's start, so far: not yet known
            self._decided = True
            if start.startswith(self.opener):
                self._call = bytearray(self._pending)
                self._pending.clear()
                self._mode = "tool_call"
                return
        super()._flush(final)

    def _calls(self, body: bytes) -> None:
        text = body.decode("utf-8", errors="replace")
        calls = self.read_calls(text)
        if calls is None:
            raw = (self._markup.text[self._markup.call_open] if self._tagged and self._markup.call_open is not None
                   else b"") + body
            self._raw_text_item(raw)
        else:
            self._whole_calls(calls)

    def read_calls(self, text: str) -> list[tuple[str, str]] | None:
        """(name, arguments JSON) per call of a held output, or None when it is not all calls."""
        raise NotImplementedError
