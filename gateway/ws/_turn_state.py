"""Codex's turn state over WebSocket: the `response.metadata` event it reads the token from.

Codex keeps an opaque sticky-routing token per logical turn, its "turn state": it keeps the
first one a server gives it, replays it on the turn's later requests, and starts each new turn
without one. Over WebSocket it sends the token it holds in `response.create`'s `client_metadata`
(`x-codex-turn-state`, beside its `x-codex-turn-metadata`) and reads the server's from the
`headers` of a `response.metadata` event (openai/codex#27996; `ResponsesStreamEvent::turn_state`
in codex-rs/codex-api/src/sse/responses.rs). The gateway echoes the token the client holds, or
gives one to a turn that has none, before the response's other events; the turn's follow-ups (a
reconnect, an HTTP fallback) then carry the same token. The gateway routes a turn by its
session and connection already: the token names the turn, nothing more.

Only a Codex client's frames get the event (their `client_metadata` holds Codex's own keys):
another client's SDK need not know an event type OpenAI's published spec does not list.
"""

from __future__ import annotations

from typing import Any

from gateway.core.ids import new_id

__all__ = ["TURN_STATE", "metadata_event"]

TURN_STATE = "x-codex-turn-state"
_CODEX_KEYS = (TURN_STATE, "x-codex-turn-metadata")


def metadata_event(body: dict[str, Any]) -> dict[str, Any] | None:
    """The `response.metadata` event for a `response.create` body, or None (not Codex's)."""
    client_metadata = body.get("client_metadata")
    if not isinstance(client_metadata, dict) or not any(key in client_metadata for key in _CODEX_KEYS):
        return None
    held = client_metadata.get(TURN_STATE)
    token = held if isinstance(held, str) and held.strip() else new_id("turn")
    return {"type": "response.metadata", "headers": {TURN_STATE: token}}
