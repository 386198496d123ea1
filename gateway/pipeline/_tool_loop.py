"""A response made of several generations: the next one after tools the gateway ran itself.

When the model calls a tool the gateway runs (a remote MCP tool), the response goes on
with another generation whose prompt is the previous prompt + the generated ids + the
tool outputs rendered: the previous turn's exact tokens are the prefix, the outputs the
only new items (gateway/tokenfix/prompt.py splices them on), never a re-render of what the
model wrote.

With a `rollout_id`, each generation is one call of the rollout: the exchange records the
finished one (gateway/pipeline/session.py `commit_generation`) before the next begins, so
the whole response is one trajectory — the model's tokens trainable, the rendered tool
outputs (a prompt delta) masked — and each turn carries the tool calls that preceded it
(`tool_calls`: server, name, seconds, error). Nothing here writes a store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from gateway.core.conversation import ToolOutput
from gateway.pipeline import trace
from gateway.pipeline.turn import Turn
from gateway.store.rollouts import Pending

__all__ = ["following"]


def following(turn: Turn, outputs: Sequence[ToolOutput], tool_calls: list[dict[str, Any]],
              rollout: Pending | None) -> Turn:
    """The next generation of `turn`'s response (not started): `turn`'s history, its output and
    `outputs`, continuing its exact tokens; `rollout`: its place in the response's rollout (the
    exchange committed `turn` there: gateway/pipeline/session.py `commit_generation`)."""
    runtime, record = turn.runtime, turn.record
    state = record.token_state(runtime.format.turn_terminators)  # None only for an unfinished turn
    history = dataclasses.replace(record.conversation, items=[*record.conversation.items, *record.turn_items,
                                                              *outputs])
    # Everything that chose the first prompt's prefix is spent: this one continues `state`.
    request = dataclasses.replace(turn.request, conversation=history, previous=None, recognised=None, resent=None,
                                  client_prefix=None, generated=(), rollout=rollout)
    following = Turn(runtime, request, sampling=turn.sampling, prefix=state, covered=None, affinity=turn.affinity)
    following.record.tool_calls = tool_calls
    trace.attach(following.record)
    return following
