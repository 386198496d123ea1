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
the window only if every probe agrees. Qwen3's template passes for tool outputs and
system messages, not for user messages: a new user query strips the reasoning of earlier
turns, which the window cannot see. Other new items (assistant items) always take the
full render.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from jinja2 import TemplateError

from gateway.core.conversation import Conversation, Item, Message, Reasoning, Tool, ToolCall, ToolOutput
from gateway.formats.base import ChatFormat, Covered, Tail
from gateway.formats.hf_render import SafeTemplateEncoder, hf_messages

log = logging.getLogger(__name__)

KINDS = ("tool", "user", "system")


def item_kind(item: Item) -> str:
    if isinstance(item, ToolOutput):
        return "tool"
    if isinstance(item, Message) and item.role != "assistant":
        return "user" if item.role == "user" else "system"
    return "assistant"


class TemplateWindow:
    def __init__(self, chat_format: ChatFormat, encoder: SafeTemplateEncoder, terminators: Sequence[str]) -> None:
        self._format = chat_format
        self._encoder = encoder
        self._terminator = re.compile("|".join(map(re.escape, terminators)))
        self._terminators = terminators
        self._headers: dict[bytes, int | None] = {}  # by context digest; None: cannot render it

    @functools.cached_property
    def kinds(self) -> frozenset[str]:
        """The kinds of new items this template renders locally (probed once, on first use)."""
        kinds = frozenset(KINDS) - _failing_kinds(self._format, self._tail)
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


# -- probing ----------------------------------------------------------------------------

def _failing_kinds(chat_format: ChatFormat, tail: Callable[[Conversation, Covered], Tail | None]) -> set[str]:
    """Kinds for which some probe's windowed continuation differs from full render + splice."""
    from gateway.tokenfix.splice import splice, splice_tail
    from gateway.tokenfix.state import TokenState

    failing: set[str] = set()
    terminators = chat_format.turn_terminators
    for context in _CONTEXTS:
        for before, turn, new in _PROBES:
            for cut in (False, True):
                history = dataclasses.replace(context, items=before)
                state = TokenState.of_template_turn(chat_format, history, turn, cut=cut)
                if state is None:
                    continue
                for kind, items in new.items():
                    conversation = dataclasses.replace(context, items=[*before, *turn, *items])
                    covered = state.continued_by(conversation, terminators)
                    assert covered is not None
                    head = dataclasses.replace(conversation, items=conversation.items[:covered.items])
                    expected = splice(state.tokens, state.prompt_len, chat_format.render(head),
                                      chat_format.render(conversation), terminators)
                    try:
                        found = tail(conversation, covered)
                    except Exception as exc:  # noqa: BLE001 - any failure disqualifies the kind
                        log.debug("windowed render failed on a probe: %r", exc)
                        failing.add(kind)
                        continue
                    if found is None:
                        continue  # declined: the full render runs instead
                    spliced = splice_tail(state, found, terminators)
                    if _ids(spliced) != _ids(expected):
                        failing.add(kind)
    return failing


def _ids(ids: Sequence[int] | None) -> list[int] | None:
    return None if ids is None else list(ids)


_TOOL = Tool(name="read_file", description="Read a file.",
             parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
_CONTEXTS = (
    Conversation(items=[], instructions="You are a careful coding agent.", tools=[_TOOL]),
    Conversation(items=[], instructions="You are terse."),
    Conversation(items=[], tools=[_TOOL]),
    Conversation(items=[]),
)


def _call(call_id: str) -> ToolCall:
    return ToolCall(call_id=call_id, name="read_file", arguments=f'{{"path": "{call_id}.py"}}')


def _output(call_id: str, text: str = "def main():\n    return 0\n") -> ToolOutput:
    return ToolOutput(call_id=call_id, output=text, name="read_file")


def _new(call_id: str | None) -> dict[str, list[Item]]:
    new: dict[str, list[Item]] = {"user": [Message(role="user", text="Now run the tests.")],
                                  "system": [Message(role="developer", text="The sandbox is read-only.")]}
    if call_id is not None:
        new["tool"] = [_output(call_id)]
    return new


_QUERY = Message(role="user", text="Fix the failing test.")
# (history before the model's turn, the model's turn, new items by kind)
_PROBES: tuple[tuple[list[Item], list[Item], dict[str, Any]], ...] = (
    ([_QUERY], [Reasoning(text="Look at the test first."), _call("c1")], _new("c1")),
    ([_QUERY, Reasoning(text="Read it."), _call("c0"), _output("c0")],
     [Reasoning(text="Now the module."), _call("c1")], _new("c1")),
    ([_QUERY, _call("c0"), _output("c0")], [_call("c1"), _call("c2")],
     {**_new(None), "tool": [_output("c1"), _output("c2", "<tool_response>x</tool_response>")]}),
    ([_QUERY, Reasoning(text="Easy."), Message(role="assistant", text="Done."), Message(role="user", text="More?")],
     [Message(role="assistant", text="Nothing more.")], _new(None)),
    ([_QUERY, Message(role="developer", text="Be brief.")], [Reasoning(text="Hmm."), _call("c1")], _new("c1")),
)
