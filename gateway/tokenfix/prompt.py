"""The one prompt decision: which exact earlier tokens a prompt reuses, and how.

Given a conversation and the exact tokens of an earlier turn (`prefix`), the prompt is,
in this order:
1. if the history continues the prefix (`TokenState.continued_by`, or a `Covered` the
   caller already checked) and the format can render the new items alone
   (`render_tail`), the prefix's tokens spliced onto that tail (`splice_tail`): the cost
   follows the new items, not the history;
2. if it continues but the format cannot render the tail alone, the full render with the
   prefix's tokens spliced in (`splice`);
3. otherwise the full render, flagged `non_monotonic` when a prefix was offered.
A tail that renders but does not splice gives the same verdict as the full splice would:
the history does not continue the prefix.

`PromptBuilder` keeps the two costly steps apart (`tail()` and `full()`), so the turn
pipeline can run each off the event loop when its input is big; `build_prompt` runs the
whole decision synchronously (the reasoning-blob restore, the template locality probe).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.core.conversation import Conversation, Item
from gateway.formats.base import ChatFormat, Covered
from gateway.tokenfix._splice import splice, splice_tail
from gateway.tokenfix.state import TokenState

__all__ = ["PromptBuilder", "build_prompt"]


class PromptBuilder:
    """One prompt's decision. After `tail()` or `full()` returned the ids, `spliced`,
    `non_monotonic` and `continued` say how they were made."""

    __slots__ = ("_covered", "_format", "continued", "conversation", "non_monotonic", "prefix", "spliced")

    def __init__(self, chat_format: ChatFormat, conversation: Conversation, prefix: TokenState | None,
                 covered: Covered | None = None) -> None:
        """`covered`: the caller already checked that `conversation` continues `prefix` this far."""
        self._format = chat_format
        self.conversation = conversation
        self.prefix = prefix
        if covered is None and prefix is not None:
            covered = prefix.continued_by(conversation, chat_format.turn_terminators)
        self._covered = covered
        self.continued = covered is not None  # the history starts with all of the prefix's items
        self.spliced = False  # the prompt reuses the prefix's exact tokens
        self.non_monotonic = False  # a prefix was offered, but the history does not continue it

    @property
    def new_items(self) -> Sequence[Item]:
        """The items the prefix does not cover (all of them without one)."""
        items = self.conversation.items
        return items[self._covered.items:] if self._covered is not None else items

    def tail(self) -> Sequence[int] | None:
        """Step 1: the prefix spliced onto the new items rendered alone; None: call `full()`."""
        covered, prefix = self._covered, self.prefix
        if covered is None or prefix is None:
            return None
        tail = self._format.render_tail(self.conversation, covered)
        if tail is None:
            return None
        spliced = splice_tail(prefix, tail, self._format.turn_terminators, self._format.turn_openers)
        if spliced is None:
            self._covered = None  # the same verdict as splicing the full renders: it does not continue
            return None
        self.spliced = True
        return spliced

    def full(self) -> Sequence[int]:
        """Steps 2 and 3: the full render, with the prefix's tokens spliced in when it continues."""
        chat_format, conversation, prefix, covered = self._format, self.conversation, self.prefix, self._covered
        template = chat_format.render(conversation)
        if prefix is None:
            return template
        if covered is not None:
            head = dataclasses.replace(conversation, items=conversation.items[:covered.items])
            spliced = splice(prefix.tokens, prefix.prompt_len, chat_format.render(head), template,
                             chat_format.turn_terminators, chat_format.turn_openers)
            if spliced is not None:
                self.spliced = True
                return spliced
        self.non_monotonic = True
        return template


@dataclass(frozen=True, slots=True)
class Prompt:
    ids: Sequence[int]  # a list, or an int32 array when spliced onto exact tokens
    spliced: bool
    non_monotonic: bool


def build_prompt(chat_format: ChatFormat, conversation: Conversation, prefix: TokenState | None,
                 covered: Covered | None = None) -> Prompt:
    """The whole decision, synchronously."""
    builder = PromptBuilder(chat_format, conversation, prefix, covered)
    ids = builder.tail()
    if ids is None:
        ids = builder.full()
    return Prompt(ids, builder.spliced, builder.non_monotonic)
