"""A tool-call section read by a family's own state machine, inside Hermes-style text/reasoning.

GLM, DeepSeek (and Kimi), Mistral and Qwen3-Coder's XML (`xml_calls`) open a call section with
one marker token, as hermes' `<tool_call>` does, but write their calls in their own markup.
`HermesOutputParser` keeps what is outside the section (text, reasoning, the `<think>` switch, a
marker out of place as text); inside it, the family reads: the bytes of ordinary tokens wait in the
parser's `_call` buffer until they are consumed (`_read`), and each marker id goes to
`_section_markup`. A call's arguments stream through `HermesOutputParser`'s `_start_call`, `_emit`
and `_end_arguments` (or, one parameter at a time, `_start_object`, `_member` and `_end_object`).
"""

from __future__ import annotations

from gateway.formats.base import ParseEvent
from gateway.formats.hf.parser import HermesOutputParser

__all__ = ["CallSectionParser"]


class CallSectionParser(HermesOutputParser):
    """A `HermesOutputParser` whose call section a subclass reads (see the module docstring)."""

    def finish(self) -> list[ParseEvent]:
        if self._mode != "tool_call":
            return super().finish()
        self._finish_section()
        self._section_closed()
        return self._take_events()

    def _on_markup(self, token_id: int) -> None:
        if self._mode != "tool_call":
            opens = self._mode == "text" and token_id == self._markup.call_open
            super()._on_markup(token_id)
            if opens:
                self._section_opened()
            return
        self._consume()
        self._section_markup(token_id)

    def _flush(self, final: bool = False) -> None:
        if self._mode == "tool_call":
            self._consume()
        else:
            super()._flush(final)

    def _section_closed(self) -> None:
        """The section is over: what follows is text."""
        self._mode = "text"
        self._open_segment()

    # what the family reads --------------------------------------------------------------------

    def _section_opened(self) -> None:
        """The section's opening marker was read (the text before it is closed): a call starts."""
        self._reset_call()

    def _reset_call(self) -> None:
        """The family's state for a new call."""
        raise NotImplementedError

    def _consume(self) -> None:
        """Read the section's bytes that waited in `_call`."""
        data = bytes(self._call)
        self._call.clear()
        if data:
            self._read(data)

    def _read(self, data: bytes) -> None:
        """The section's bytes since the last marker, for the family's state."""
        raise NotImplementedError

    def _section_markup(self, token_id: int) -> None:
        """A marker inside the section (its bytes before it consumed)."""
        raise NotImplementedError

    def _finish_section(self) -> None:
        """The output ended inside the section: close what it holds, as items or as text (then
        `_section_closed`)."""
        raise NotImplementedError
