"""Compaction: a long history replaced by a summary the model writes (Codex's remote compaction).

Two ways in, one turn: `POST /v1/responses/compact` (the history in, the compacted window out:
its user messages and one `compaction` item), and a `compaction_trigger` item as the last input
of an ordinary `response.create` (Codex's compaction v2; the response's output is exactly one
`compaction` item), over HTTP, SSE and WebSocket alike. Either way the trigger becomes one
user message asking for a summary, appended to the history as it is, tools and all, so the
summary turn is an ordinary turn of the pipeline that continues the session's exact tokens.

The summary travels in the item's `encrypted_content`, sealed like a reasoning blob
(gateway/adapters/reasoning_blob.py: authenticated, so a compacted history holds only what this
gateway's model wrote). A later request that sends the item back gets it as a user message
holding the summary: the compacted history is a rewritten history, rendered afresh from its
items (the turn is flagged `non_monotonic` when its session's cached tokens were offered), and
from there on its turns are exact again. The summary turn itself is not committed: what comes
next continues the compacted history, not the one that was summarized.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.adapters import reasoning_blob
from gateway.adapters.request_schema import CompactionItem, InputItem, OtherItem
from gateway.core.conversation import Item, Message, Reasoning
from gateway.core.errors import invalid_request
from gateway.core.ids import new_id

__all__ = ["TRIGGER", "compaction_item", "kept_messages", "summary_message", "summary_prompt", "summary_text",
           "take_trigger"]

TRIGGER = "compaction_trigger"

SUMMARY_PROMPT = (
    "Context compaction: write a handoff summary of this conversation for another model that will "
    "continue the work without seeing it. Include the user's goals and constraints, decisions made, "
    "the current state of the work (files, commands, results) and what remains to be done. Be concise "
    "and reply with the summary only."
)
# What a compaction item reads as when it comes back in a history.
SUMMARY_HEADER = "Summary of the earlier conversation, which was compacted:\n\n"


def take_trigger(found: str | list[InputItem]) -> tuple[str | list[InputItem], bool]:
    """`input` without a final `compaction_trigger`, and whether there was one (anywhere else
    it is refused, as OpenAI's description says: it must be the final input item)."""
    if isinstance(found, str):
        return found, False
    at = [i for i, item in enumerate(found) if isinstance(item, OtherItem) and item.type == TRIGGER]
    if not at:
        return found, False
    if at != [len(found) - 1]:
        raise invalid_request("A 'compaction_trigger' item must be the final input item, and only one.",
                              param=f"input[{at[0]}]", code="invalid_compaction_trigger")
    return found[:-1], True


def summary_prompt() -> Message:
    return Message(role="user", text=SUMMARY_PROMPT)


def summary_message(item: CompactionItem, param: str) -> Message:
    """A `compaction` input item: the summary it seals, as a user message."""
    sealed = reasoning_blob.unseal(item.encrypted_content)
    if sealed is None:
        raise invalid_request(f"'{param}.encrypted_content' is not a compaction of this gateway (compacted "
                              f"elsewhere, or sealed with another --reasoning-secret).",
                              param=f"{param}.encrypted_content", code="invalid_encrypted_content")
    return Message(role="user", text=SUMMARY_HEADER + sealed.text)


def summary_text(output_items: Sequence[Item]) -> str:
    """What the model answered: the text of its messages; its reasoning when it wrote none (it
    may have called a tool instead: the tools stay offered, so that the prompt continues the
    session's tokens)."""
    for kind in (Message, Reasoning):
        text = "\n\n".join(item.text for item in output_items if isinstance(item, kind) and item.text).strip()
        if text:
            return text
    return ""


def compaction_item(summary: str) -> dict[str, Any]:
    return {"type": "compaction", "id": new_id("cmp"), "encrypted_content": reasoning_blob.seal(summary)}


def kept_messages(history: Sequence[Item]) -> list[dict[str, Any]]:
    """The user messages of a compacted history, as `/responses/compact` returns them before its
    compaction item (not the summary prompt, nor the summaries of earlier compactions)."""
    return [{"type": "message", "id": new_id("msg"), "status": "completed", "role": "user",
             "content": [{"type": "input_text", "text": item.text}]}
            for item in history if isinstance(item, Message) and item.role == "user"
            and item.text != SUMMARY_PROMPT and not item.text.startswith(SUMMARY_HEADER)]
