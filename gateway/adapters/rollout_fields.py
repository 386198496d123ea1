"""The RL request fields shared by Chat Completions and the Responses API.

- `rollout_id`: records the call in that rollout's trajectory (gateway/sessions/rollouts.py),
  continues from its exact tokens and pins it to one replica.
- `response_mask`: one 0/1 per prompt token the call adds to the rollout (checked with 422).
- `prompt_token_ids` + `generation_token_ids` on an assistant message (NeMo-RL's
  convention): the exact tokens behind the history up to that message.
"""

from __future__ import annotations

import re
from typing import Any

from gateway.adapters.request_schema import ROLLOUT_ID
from gateway.adapters.validation import expect
from gateway.core.errors import invalid_request
from gateway.pipeline import session
from gateway.pipeline.runtime import Runtime
from gateway.sessions.rollouts import Pending

__all__ = ["begin_rollout"]

_ROLLOUT_ID = re.compile(ROLLOUT_ID)


async def begin_rollout(runtime: Runtime, body: dict[str, Any]) -> Pending | None:
    """The call's place in its rollout, or None without `rollout_id`; 410 if the rollout is gone."""
    rollout_id = expect(body.get("rollout_id"), str, "rollout_id")
    mask = expect(body.get("response_mask"), list, "response_mask")
    if rollout_id is None:
        if mask is not None:
            raise invalid_request("'response_mask' needs a 'rollout_id': it masks the tokens a call adds to "
                                  "that rollout.", param="response_mask", code="missing_required_parameter")
        return None
    if not _ROLLOUT_ID.match(rollout_id):  # a header's (X-Session-ID); a body's passed its schema
        raise invalid_request("Invalid 'rollout_id': expected 1-256 characters of A-Z, a-z, 0-9, '_', '.', ':', "
                              "'-'.", param="rollout_id", code="invalid_value")
    return await session.begin_rollout(runtime, rollout_id, mask)

