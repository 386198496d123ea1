"""Conversations: server-side histories that outlive `previous_response_id` chains (/v1/conversations).

A conversation holds its items twice: as the API shows them (dicts with ids, in order: what
GET …/items pages through) and as the canonical items the model's format renders, with the
exact tokens of the last response that ran in it. The next response's prompt is those tokens
plus its new items rendered — never a re-render, across as many responses as the
conversation lives. Items added from outside a response (POST …/items) extend the history and
leave the tokens a prefix of it; an item deleted makes them stale (they are dropped: the next
prompt is rendered in full).

`ConversationStore` is the interface; two backends: `MemoryConversations` (this process, least
recently used out past a bound) and `RedisConversations` (gateway/store/redis/conversations.py,
`--state-url`: shared by every gateway process). Writes name the version they read: a write
over a conversation that moved on in between answers False, and the caller reads again.
A deleted conversation leaves a tombstone for a while, so its id is answered as deleted, not unknown.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.core.conversation import Item
from gateway.tokenfix.state import TokenState

__all__ = ["ConversationStore", "MemoryConversations", "StoredConversation"]


@dataclass(slots=True)
class StoredConversation:
    conversation_id: str  # as stored: the tenant's scope included
    created_at: int
    metadata: dict[str, str] = field(default_factory=dict)
    items: list[dict[str, Any]] = field(default_factory=list)  # as the API shows them, each with its "id"
    history: list[Item] = field(default_factory=list)  # what the model sees: the items, canonical
    tokens: TokenState | None = None  # exact prompt + generated ids of the last response, a prefix of `history`
    version: int = 0  # bumped by every write
    deleted: bool = False  # a tombstone: the id was a conversation, deleted


class ConversationStore(Protocol):
    kind: str  # "memory" | "redis"

    async def get(self, conversation_id: str) -> StoredConversation | None: ...

    async def put(self, conversation: StoredConversation, expected_version: int | None) -> bool:
        """Write `conversation` (its version bumped) if the stored one is still `expected_version`
        (None: if there is none); False when it moved on (another write came first)."""

    async def close(self) -> None: ...


class MemoryConversations:
    """This process's conversations, least recently used first out past `max_entries`."""

    kind = "memory"

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, StoredConversation] = OrderedDict()

    def __len__(self) -> int:
        """Conversations held (deleted ones' tombstones too)."""
        return len(self._entries)

    async def get(self, conversation_id: str) -> StoredConversation | None:
        found = self._entries.get(conversation_id)
        if found is not None:
            self._entries.move_to_end(conversation_id)
        return found

    async def put(self, conversation: StoredConversation, expected_version: int | None) -> bool:
        held = self._entries.get(conversation.conversation_id)
        if (held.version if held is not None else None) != expected_version:
            return False
        conversation.version = (expected_version or 0) + 1
        self._entries[conversation.conversation_id] = conversation
        self._entries.move_to_end(conversation.conversation_id)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return True

    async def close(self) -> None:
        pass
