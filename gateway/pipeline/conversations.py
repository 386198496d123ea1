"""Conversations as a response meets them: loaded for a turn, written back after it.

The routes of /v1/conversations and the `conversation` parameter of POST /v1/responses
(HTTP and WebSocket) come through here; none of them touches the store
(gateway/store/conversations.py). Ids are the caller's tenant's (`scoped`, as every
other key): another tenant's conversation is an unknown one.

A response in a conversation continues its exact tokens; when it ends normally its input
items and output items are appended (`append_turn`) and its tokens become the
conversation's. A response that failed appends nothing. When another write came between
this turn's read and its own (two responses at once, items added meanwhile), the turn's
items go after the other's and its tokens are dropped (they do not cover the other's
items): the next prompt is rendered in full, never wrong.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from gateway.core.conversation import Item
from gateway.core.errors import APIError, invalid_request
from gateway.core.ids import new_id
from gateway.core.tenancy import scoped
from gateway.pipeline.runtime import Runtime
from gateway.store.conversations import StoredConversation
from gateway.tokenfix.state import TokenState

__all__ = ["append_turn", "change", "create", "delete", "load"]

log = logging.getLogger(__name__)

MAX_ITEMS = 10_000  # items one conversation may hold
_TRIES = 8  # writes raced by others before giving up


async def create(runtime: Runtime, metadata: dict[str, str], items: list[dict[str, Any]],
                 history: list[Item]) -> StoredConversation:
    _check_size(len(items))
    conversation_id = new_id("conv")
    stored = StoredConversation(scoped(conversation_id), int(time.time()), metadata, items, history)
    written = await runtime.conversations.put(stored, None)
    assert written, "a fresh id is free"
    return _as_client_sees(stored, conversation_id)


async def load(runtime: Runtime, conversation_id: str, param: str | None = None) -> StoredConversation:
    """The caller's conversation `conversation_id`; 404 when it is unknown (or another tenant's) or deleted."""
    found = await runtime.conversations.get(scoped(conversation_id))
    if found is None:
        raise APIError(f"Conversation with id '{conversation_id}' not found.", status=404, param=param,
                       code="conversation_not_found")
    if found.deleted:
        raise APIError(f"Conversation with id '{conversation_id}' was deleted.", status=404, param=param,
                       code="conversation_not_found")
    return _as_client_sees(found, conversation_id)


async def change(runtime: Runtime, conversation_id: str,
                 edit: Callable[[StoredConversation], None]) -> StoredConversation:
    """Apply `edit` to the conversation as stored and write it back, again on the newest
    version when another write came first; 404 as `load`."""
    for _ in range(_TRIES):
        found = await load(runtime, conversation_id)
        version = found.version
        edited = dataclasses.replace(found, items=list(found.items), history=list(found.history),
                                     metadata=dict(found.metadata), conversation_id=scoped(conversation_id))
        edit(edited)
        _check_size(len(edited.items))
        if await runtime.conversations.put(edited, version):
            return _as_client_sees(edited, conversation_id)
    raise APIError(f"Conversation '{conversation_id}' is being changed by many requests at once; try again.",
                   status=409, code="conversation_locked")


async def delete(runtime: Runtime, conversation_id: str) -> None:
    def tombstone(stored: StoredConversation) -> None:
        stored.items, stored.history, stored.tokens, stored.deleted = [], [], None, True

    await change(runtime, conversation_id, tombstone)


async def append_turn(runtime: Runtime, conversation_id: str, read_version: int, items: list[dict[str, Any]],
                      history: list[Item], tokens: TokenState | None) -> None:
    """A response that ran in the conversation (read at `read_version`) ended normally: its
    items follow the conversation's; its exact tokens are kept if nothing was written between."""
    def appended(stored: StoredConversation) -> None:
        exact = stored.version == read_version
        stored.items += items
        stored.history += history
        stored.tokens = tokens if exact else None
        if not exact:
            log.info("conversation %s changed while a response ran in it: its next prompt is rendered in full",
                     conversation_id)

    try:
        await change(runtime, conversation_id, appended)
    except APIError as exc:  # deleted meanwhile, or the store gone: the response itself stands
        log.warning("conversation %s: the response's items were not appended (%s)", conversation_id, exc.message)


def _check_size(n_items: int) -> None:
    if n_items > MAX_ITEMS:
        raise invalid_request(f"A conversation holds at most {MAX_ITEMS} items; this one would hold {n_items}.",
                              param="items", code="conversation_too_large")


def _as_client_sees(stored: StoredConversation, conversation_id: str) -> StoredConversation:
    return dataclasses.replace(stored, conversation_id=conversation_id)
