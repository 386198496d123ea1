"""Conversations in Redis (`--state-url`): any gateway process continues any conversation.

One hash per conversation, `{prefix}c:{id}`: its version `v`, its metadata, items and
canonical history as JSON (`meta`) and the exact tokens as int32 bytes (`t`), with a TTL
renewed by every write. A write is one script call that first checks the version the
writer read, so two responses finishing on one conversation never lose each other's
items. A deleted conversation is a tombstone hash (`deleted`), kept a day.

Unlike a session, a conversation cannot be rebuilt from the request (the client does not
resend its history), so a store that cannot answer is a 503, not a silent fresh start.
"""

from __future__ import annotations

from gateway.core.errors import APIError
from gateway.store.conversations import StoredConversation
from gateway.store.observer import StoreObserver
from gateway.store.redis import _codec as codec
from gateway.store.redis.link import RedisLink, StoreDown

__all__ = ["RedisConversations"]

TTL = 30 * 24 * 3600.0  # seconds a conversation lives after its last write
TOMBSTONE_TTL = 24 * 3600.0

# ARGV: the expected version ('' for none), the new version, meta, tokens, TTL in ms. 1: written.
_PUT = """
local v = redis.call('HGET', KEYS[1], 'v')
if (v or '') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'meta', ARGV[3], 't', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""


class RedisConversations:
    kind = "redis"

    def __init__(self, url: str, *, key_prefix: str = "gw:", observer: StoreObserver | None = None,
                 ttl: float = TTL) -> None:
        self.link = RedisLink(url, observer or StoreObserver())
        self.prefix = key_prefix
        self.ttl = ttl
        self._put = self.link.script(_PUT)

    async def get(self, conversation_id: str) -> StoredConversation | None:
        name = self._key(conversation_id)
        try:
            version, meta, tokens = await self.link.call(
                "conversation_read", lambda: self.link.client.hmget(name, "v", "meta", "t"), key=name)
        except StoreDown as exc:
            raise _unavailable(exc) from exc
        if version is None:
            return None
        fields = codec.loads(meta)
        state = codec.state_from(fields["state"], codec.ids_from_bytes(tokens)) if fields.get("state") else None
        return StoredConversation(conversation_id, fields["created_at"], fields["metadata"], fields["items"],
                                  fields["history"], state, int(version), fields.get("deleted", False))

    async def put(self, conversation: StoredConversation, expected_version: int | None) -> bool:
        state = conversation.tokens
        meta = codec.dumps({"created_at": conversation.created_at, "metadata": conversation.metadata,
                            "items": conversation.items, "history": conversation.history,
                            "state": codec.state_meta(state) if state is not None else None,
                            "deleted": conversation.deleted})
        tokens = codec.ids_to_bytes(state.tokens) if state is not None else b""
        version = (expected_version or 0) + 1
        ttl = TOMBSTONE_TTL if conversation.deleted else self.ttl
        args = ["" if expected_version is None else str(expected_version), str(version), meta, tokens,
                str(int(ttl * 1000))]
        try:
            name = self._key(conversation.conversation_id)
            written = await self.link.call("conversation_write", lambda: self._put(keys=[name], args=args),
                                           n_sent=len(meta) + len(tokens), key=name)
        except StoreDown as exc:
            raise _unavailable(exc) from exc
        if written:
            conversation.version = version
        return bool(written)

    async def close(self) -> None:
        await self.link.close()

    def _key(self, conversation_id: str) -> str:
        return f"{self.prefix}c:{conversation_id}"


def _unavailable(exc: StoreDown) -> APIError:
    return APIError(f"The conversation store is {'full' if exc.reason == 'full' else 'unreachable'}; try again "
                    f"shortly.", status=503, type="server_error", code="state_store_unavailable")
