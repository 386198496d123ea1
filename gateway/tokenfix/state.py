"""The exact tokens behind a conversation, and the check that a new request continues it."""

from __future__ import annotations

import dataclasses
import hashlib
from array import array
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from gateway.core.conversation import Conversation, Item, Message, Reasoning, ToolCall, ToolOutput
from gateway.formats.base import ChatFormat, Covered
from gateway.tokenfix._terminators import count_terminators
from gateway.upstream.prefix_index import KeyChain

__all__ = ["TokenState", "context_digest"]


class HistoryHash:
    """`history_digest` as a running hash, so a continued history extends its prefix's hash
    instead of hashing every item again. Two SHA-256 streams, the fields' lengths (-1 for None)
    and their text: together they decode to exactly one list of items, however the items were
    split into batches. The per-item work is one C-level getter."""

    __slots__ = ("_lengths", "_text")

    def __init__(self, lengths: Any = None, text: Any = None) -> None:
        self._lengths = lengths or hashlib.sha256()
        self._text = text or hashlib.sha256()

    def update(self, items: Iterable[Item]) -> HistoryHash:
        values: list[str | None] = []
        for item in items:
            values += _FIELDS[type(item)](item)
        self._lengths.update(array("q", [-1 if value is None else len(value) for value in values]))
        self._text.update("".join([value for value in values if value]).encode("utf-8", "surrogatepass"))
        return self

    def copy(self) -> HistoryHash:
        return HistoryHash(self._lengths.copy(), self._text.copy())

    def digest(self) -> bytes:
        return hashlib.sha256(self._lengths.digest() + self._text.digest()).digest()


def history_digest(items: Iterable[Item]) -> bytes:
    """What a `TokenState` knows its history by: equal digests, equal items."""
    return HistoryHash().update(items).digest()


def _fields(cls: type) -> Any:
    """The item's class name and fields; an item's images (`parts`) as one more value, only when it has
    any (text-only items hash as they always did): each part its text (length-prefixed) or image digest."""
    text = attrgetter("__class__.__name__", *(name for name in cls.__slots__ if name != "parts"))
    if "parts" not in cls.__slots__:
        return text

    def fields(item: Any) -> tuple[str | None, ...]:
        if not item.parts:
            return text(item)
        parts = "".join(f"t{len(p)}:{p}" if isinstance(p, str) else f"i{p.digest}" for p in item.parts)
        return (*text(item), "\0parts" + parts)
    return fields


_FIELDS = {cls: _fields(cls) for cls in (Message, Reasoning, ToolCall, ToolOutput)}


def context_digest(conversation: Conversation) -> bytes:
    """What shapes a render besides the items: instructions, tools, reasoning effort."""
    context = (conversation.instructions, conversation.tools, conversation.tool_choice,
               conversation.reasoning_effort)
    return hashlib.blake2b(repr(context).encode(), digest_size=16).digest()


@dataclass(slots=True)
class TokenState:
    """`tokens` are exactly what the model saw and produced for the first `items` items of a
    history (the last ones being the model's own output). Ids are a compact int32 array."""

    context: bytes
    items: int  # how many items of the history…
    digest: bytes  # …and their `history_digest`
    tokens: array
    prompt_len: int  # tokens[:prompt_len] was the prompt, the rest the model's generation
    prompt_items: int  # the prompt rendered the first `prompt_items` items; the rest are the model's turn
    prompt_turns: int | None = None  # turn terminators in the prompt… (None: not counted yet)
    model_turns: int | None = None  # …and in all of `tokens`
    prompt_hash: HistoryHash | None = None  # the running digest after the prompt's items…
    history_hash: HistoryHash | None = None  # …and after all `items`: a continuation extends it
    # The prompt's chunk keys (prefix routing, this process only): the next prompt hashes only its new chunks.
    keys: KeyChain | None = field(default=None, compare=False, repr=False)

    @classmethod
    def build(cls, conversation: Conversation, items: Sequence[Item], prompt: Sequence[int],
              generated: Sequence[int], terminators: Collection[int] | None = None, *,
              prompt_items: int | None = None, after: TokenState | None = None,
              keys: KeyChain | None = None) -> TokenState:
        """`conversation` was the prompt (its first `prompt_items` items, by default all of them);
        `items` are those followed by the model's turn, or with `after` (a state whose items the
        conversation was checked to continue) only what follows `after`'s items. Without
        `terminators` they are counted when the state is first continued. `keys`: the prompt's
        chunk keys, as the router made them."""
        prompt_items = len(conversation.items) if prompt_items is None else prompt_items
        if after is not None:
            assert after.history_hash is not None, "`after` without its running digest"
            skipped, running = after.items, after.history_hash.copy()
        else:
            skipped, running = 0, HistoryHash()
        running.update(items[:prompt_items - skipped])
        prompt_hash = running.copy()
        running.update(items[prompt_items - skipped:])
        tokens = array("i", prompt)
        tokens.extend(generated)
        state = cls(context_digest(conversation), skipped + len(items), running.digest(), tokens, len(prompt),
                    prompt_items, prompt_hash=prompt_hash, history_hash=running, keys=keys)
        if terminators is not None:
            state.prompt_turns = count_terminators(prompt, terminators)
            state.model_turns = state.prompt_turns + count_terminators(generated, terminators)
        return state

    @classmethod
    def of_template_turn(cls, chat_format: ChatFormat, before: Conversation, turn: Sequence[Item], *,
                         cut: bool = False) -> TokenState | None:
        """The state after a turn in which the model wrote `turn` exactly as the template renders
        it (`cut`: stopped by the length limit before its last terminator). For probes, tests and
        benchmarks; None when the template's render of the turn does not extend the prompt."""
        prompt = chat_format.render(before)
        items = [*before.items, *turn]
        head = chat_format.render(dataclasses.replace(before, items=items))
        terminators = chat_format.turn_terminators
        end = max((i for i, token in enumerate(head) if token in terminators), default=-1)
        if head[:len(prompt)] != prompt or end < len(prompt):
            return None
        return cls.build(before, items, prompt, head[len(prompt):end if cut else end + 1], terminators)

    def prompt_of(self, conversation: Conversation) -> array | None:
        """The prompt these tokens were generated from, when `conversation` is exactly the history
        it rendered (the call that produced them, asked about again); else None."""
        items = conversation.items
        if self.prompt_hash is None or len(items) != self.prompt_items or context_digest(conversation) != self.context:
            return None
        if history_digest(items) != self.prompt_hash.digest():
            return None
        return self.tokens[:self.prompt_len]

    def continued_by(self, conversation: Conversation, terminators: Collection[int]) -> Covered | None:
        """What of `conversation` this state covers, or None if it does not continue it
        (a rewritten history, other instructions or tools)."""
        count, items = self.items, conversation.items
        if count == 0 or len(items) <= count or context_digest(conversation) != self.context:
            return None
        if history_digest(items[:count]) != self.digest:
            return None
        return self.covered(terminators)

    def covered(self, terminators: Collection[int]) -> Covered:
        """The verdict for a history checked to continue this state's items."""
        if self.prompt_turns is None or self.model_turns is None:
            self.prompt_turns = count_terminators(self.tokens[:self.prompt_len], terminators)
            self.model_turns = count_terminators(self.tokens, terminators)
        return Covered(items=self.items, turn_start=self.prompt_items, prompt_turns=self.prompt_turns,
                       context=self.context)
