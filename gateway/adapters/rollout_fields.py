"""The RL request fields shared by Chat Completions and the Responses API.

- `rollout_id`: records the call in that rollout's trajectory (gateway/store/rollouts.py),
  continues from its exact tokens and pins it to one replica.
- `response_mask`: one 0/1 per prompt token the call adds to the rollout (checked with 422).
- `prompt_token_ids` + `generation_token_ids` on an assistant message (NeMo-RL's
  convention): the exact tokens behind the history up to that message.
"""

from __future__ import annotations

import re
from typing import Any

from gateway.adapters.request_schema import ROLLOUT_ID
from gateway.core.errors import invalid_request
from gateway.pipeline.request import RolloutCall

__all__ = ["rollout_call"]

_ROLLOUT_ID = re.compile(ROLLOUT_ID)


def rollout_call(body: dict[str, Any]) -> RolloutCall | None:
    """The rollout the call is recorded in, or None without `rollout_id` (the exchange takes its place
    there: gateway/pipeline/exchange.py `prepare`). `body`: checked by its API's model (the fields'
    types), or a header's rollout id."""
    rollout_id, mask = body.get("rollout_id"), body.get("response_mask")
    if rollout_id is None:
        if mask is not None:
            raise invalid_request("'response_mask' needs a 'rollout_id': it masks the tokens a call adds to "
                                  "that rollout.", param="response_mask", code="missing_required_parameter")
        return None
    if not _ROLLOUT_ID.match(rollout_id):  # a header's (X-Session-ID); a body's passed its schema
        raise invalid_request("Invalid 'rollout_id': expected 1-256 characters of A-Z, a-z, 0-9, '_', '.', ':', "
                              "'-'.", param="rollout_id", code="invalid_value")
    return RolloutCall(rollout_id, mask)

