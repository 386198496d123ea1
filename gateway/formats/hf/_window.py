"""Rendering only the new items of a continued conversation through a HF chat template.

A chat template is one Jinja program over the whole conversation, so it cannot render
"the new messages" alone. It can render a window: the same system/tools header, then the
model's last turn, then the new items. For a template that writes each message from its
neighbourhood only, the text after the model's turn is the same in that window as in the
full render, and only that text needs tokenizing: the cost follows the new items, not the
history. The terminators before it are counted, not tokenized: the full render's are the
prompt's (known from the exact tokens), minus the header's, plus the window's own. (A
template that cannot render the header alone gets the prompt's last item in the window too.)

Whether a template is that local cannot be read off its source, so it is tested on first
use, per kind of new item (tool outputs, user messages, later system messages): probe
conversations are continued both ways, full render + splice and window, and a kind uses
the window only if every probe agrees. The probe splices exact tokens, which is
gateway/tokenfix's business: it lives in gateway/tokenfix/locality.py, and whoever builds the
format passes it in (`HFChatFormat(locality=…)`, as the server does); without one no kind is windowed.
Qwen3's template passes for tool outputs and system messages, not for user messages: a
new user query strips the reasoning of earlier turns, which the window cannot see. Other
new items (assistant items) always take the full render.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
from collections.abc import Sequence

from jinja2 import TemplateError

from gateway.core.conversation import Conversation, Item, Message, ToolOutput
from gateway.formats.base import ChatFormat, Covered, LocalityProbe, Tail
from gateway.formats.hf.render import SafeTemplateEncoder, hf_messages

__all__ = ["TemplateWindow"]

log = logging.getLogger(__name__)

KINDS = ("tool", "user", "system")


def item_kind(item: Item) -> str:
    if isinstance(item, ToolOutput):
        return "tool"
    if isinstance(item, Message) and item.role != "assistant":
        return "user" if item.role == "user" else "system"
    return "assistant"




class TemplateWindow:
    def __init__(self, chat_format: ChatFormat, encoder: SafeTemplateEncoder, terminators: Sequence[str],
                 probe: LocalityProbe | None) -> None:
        self._format = chat_format
        self._probe = probe
        self._encoder = encoder
        self._terminator = re.compile("|".join(map(re.escape, terminators)))
        self._terminators = terminators
        self._headers: dict[bytes, int | None] = {}  # by context digest; None: cannot render it

    @functools.cached_property
    def kinds(self) -> frozenset[str]:
        """The kinds of new items this template renders locally (probed once, on first use;
        with no probe, none: the full render is always right)."""
        kinds = frozenset(KINDS) - self._probe(self._format, self._tail) if self._probe is not None else frozenset()
        log.info("chat template renders %s new items incrementally", ", ".join(sorted(kinds)) or "no")
        return kinds

    def tail(self, conversation: Conversation, covered: Covered) -> Tail | None:
        if any(item_kind(item) not in self.kinds for item in conversation.items[covered.items:]):
            return None
        return self._tail(conversation, covered)

    def _tail(self, conversation: Conversation, covered: Covered) -> Tail | None:
        """The window starts at the model's turn; for a template that cannot render the header
        alone (no items at all), one item earlier."""
        for start in (covered.turn_start, covered.turn_start - 1):
            if 0 <= start < covered.items:
                try:
                    return self._window_tail(conversation, covered, start)
                except (TemplateError, ValueError):
                    continue
        return None

    def _window_tail(self, conversation: Conversation, covered: Covered, start: int) -> Tail | None:
        items, turn_start = conversation.items, covered.turn_start
        if start == turn_start:
            before = self._header_terminators(conversation, covered.context)
        else:
            before = self._count(self._text(conversation, items[start:turn_start]))
        # The full render has the prompt's terminators, less the window's before the turn, plus its own.
        turn_terminators = self._count(self._text(conversation, items[start:covered.items]))
        window = self._text(conversation, items[start:])
        end = next((m.start() for i, m in enumerate(self._terminator.finditer(window), 1) if i == turn_terminators),
                   None)
        if end is None:
            return None
        return Tail(turns=covered.prompt_turns - before + turn_terminators, ids=self._encoder.ids(window[end:]))

    def _header_terminators(self, conversation: Conversation, context: bytes) -> int:
        """Terminators the template writes before any item (a system turn, say), by context;
        raises as the template does when it cannot render no items."""
        if context not in self._headers:
            if len(self._headers) >= 1024:
                self._headers.clear()
            try:
                self._headers[context] = self._count(self._text(conversation, []))
            except (TemplateError, ValueError):
                self._headers[context] = None
        count = self._headers.get(context)
        if count is None:
            raise ValueError("the template cannot render a conversation without items")
        return count

    def _text(self, conversation: Conversation, items: list[Item]) -> str:
        messages, tools = hf_messages(dataclasses.replace(conversation, items=items))
        return self._encoder.render_text(messages, tools)[0]

    def _count(self, text: str) -> int:
        return sum(map(text.count, self._terminators))
