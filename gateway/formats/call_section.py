"""A tool-call section read by a family's own state machine, inside Hermes-style text/reasoning.

GLM, DeepSeek (and Kimi) and Mistral open a call section with one marker token, as Qwen's
`<tool_call>` does, but write their calls in their own markup. `HermesOutputParser` keeps what
is outside the section (text, reasoning, the `<think>` switch, a marker out of place as text);
inside it, the family reads: the bytes of ordinary tokens wait in the parser's `_call` buffer
until the family `_consume`s them, and each marker id goes to `_section_markup`.
"""

from __future__ import annotations

from gateway.formats.base import ParseEvent
from gateway.formats.hf_parser import HermesOutputParser

__all__ = ["CallSectionParser"]


class CallSectionParser(HermesOutputParser):
    """A `HermesOutputParser` whose call section a subclass reads (see the module docstring)."""

    def finish(self) -> list[ParseEvent]:
        if self._mode != "tool_call":
            return super().finish()
        self._finish_section()
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

    # what the family reads --------------------------------------------------------------------

    def _section_opened(self) -> None:
        """The section's opening marker was read (the text before it is closed)."""

    def _consume(self) -> None:
        """Read the section's bytes that waited in `_call`."""
        raise NotImplementedError

    def _section_markup(self, token_id: int) -> None:
        """A marker inside the section (its bytes before it consumed)."""
        raise NotImplementedError

    def _finish_section(self) -> None:
        """The output ended inside the section: close what it holds, as items or as text."""
        raise NotImplementedError
