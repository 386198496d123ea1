"""Whether a chat template renders new items the same alone as in the whole history.

gateway/formats/hf/_window.py renders only the new items of a continued conversation in a
window; that is right only for templates that write each message from its neighbourhood.
This module probes a template on first use, per kind of new item: each probe conversation
is continued both ways, as the one prompt decision's full render + splice
(gateway/tokenfix/prompt.py) and as the window + `splice_tail`, and a kind is windowed only
if every probe agrees. The runtime's builder hands `failing_kinds` to the HF format
(`HFChatFormat(locality=failing_kinds)`, gateway/server/app.py).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

from gateway.core.conversation import Conversation, Item, Message, Reasoning, Tool, ToolCall, ToolOutput
from gateway.formats.base import ChatFormat, Covered, Tail
from gateway.tokenfix._splice import splice_tail
from gateway.tokenfix.prompt import PromptBuilder
from gateway.tokenfix.state import TokenState

__all__ = ["failing_kinds"]

log = logging.getLogger(__name__)


def failing_kinds(chat_format: ChatFormat, tail: Callable[[Conversation, Covered], Tail | None]) -> set[str]:
    """Kinds for which some probe's windowed continuation differs from full render + splice."""
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
                    expected = PromptBuilder(chat_format, conversation, state, covered).full()
                    try:
                        found = tail(conversation, covered)
                    except Exception as exc:  # noqa: BLE001 - any failure disqualifies the kind
                        log.debug("windowed render failed on a probe: %r", exc)
                        failing.add(kind)
                        continue
                    if found is None:
                        continue  # declined: the full render runs instead
                    spliced = splice_tail(state, found, terminators, chat_format.turn_openers)
                    if _ids(spliced) != list(expected):
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
    # An answer right before the model's turn: a template that renders the last query's answers with their
    # thinking (DeepSeek-V4's encoder) renders it otherwise once a new query (V4: or a tool result) follows.
    ([_QUERY, Message(role="assistant", text="Sure.")], [Message(role="assistant", text="More.")], _new(None)),
    ([_QUERY, Message(role="assistant", text="Sure."), Message(role="developer", text="Be brief.")], [_call("c1")],
     _new("c1")),
)

