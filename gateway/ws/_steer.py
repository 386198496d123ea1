"""WebSocket `response.steer`: new user input for a response while it runs (OpenAI's beta).

The shapes are OpenAI's (openai-python 3.57's `ResponseSteerEvent`, `ResponseSteerAcceptedEvent`,
`ResponseSteerPendingEvent`, `ResponseSteerFailedEvent`, `ResponseSteerErrorCode`, generated from
OpenAI's OpenAPI description; the "Mid-turn steering" guide):

- after a response's `response.created`, the client sends `{type: "response.steer",
  previous_response_id, input}` (those three fields only: no `stream_id`, the response names
  its lane); `input` is a string or a non-empty array of user messages;
- `response.steer.accepted` `{steer: {id, previous_response_id}}`: the server owns the input;
- the response ends — `response.incomplete` with `incomplete_details.reason: "steered"` when
  the steer stopped it, its own end when it finished first — and a successor
  `response.created` (its `previous_response_id` the steered response) continues from it with
  the queued input, the steered response's settings inherited;
- a response that ends with calls of the client's tools keeps the input queued:
  `response.steer.pending` `{reason: "waiting_for_required_input", required_input}` follows its
  end, and the client's next `response.create` continuing it gets the input prepended to its own;
- `response.steer.failed` `{steer: {id?, previous_response_id, input}, error: {type, code,
  message}}` when the input is refused or cannot be committed (no `id` before one was given).

What is the gateway's own: the steered generation stops at the exact ids the client was shown
(gateway/pipeline/steering.py) and becomes the lane's latest response, so the successor is an
ordinary continuation of it — its prompt is those exact ids, the template's close of that turn
and the new user turn — and the session's tokens stay exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.adapters.request_schema import validate
from gateway.adapters.responses.events import Event, ResponseWriter
from gateway.core.errors import APIError
from gateway.pipeline.steering import Steering
from gateway.ws.request import SteerFrame

__all__ = ["MAX_QUEUED", "SteerRefused", "Steerable", "accepted", "failed", "pending", "read_steer", "successor_body",
           "waiting_on", "with_pending"]

MAX_QUEUED = 16  # steers one response holds before `too_many_pending_steers`


class SteerRefused(Exception):
    """A steer answered with `response.steer.failed`: one of `ResponseSteerErrorCode`'s codes."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def read_steer(frame: dict[str, Any]) -> SteerFrame:
    """The frame as OpenAI's `ResponseSteerEvent`; SteerRefused(invalid_input) naming what is wrong."""
    try:
        return validate(SteerFrame, frame)
    except APIError as exc:
        raise SteerRefused("invalid_input", exc.message) from None


@dataclass(slots=True)
class Steerable:
    """A response on this connection that takes steers: its `response.create` body (what a
    successor inherits), lane, writer and switch, and the steers accepted so far."""

    body: dict[str, Any]
    stream_id: str | None
    writer: ResponseWriter
    steering: Steering = field(default_factory=Steering)
    steers: list[tuple[str, Any]] = field(default_factory=list)  # (steer id, input as the client sent it)


def accepted(target: Steerable, steer_id: str) -> Event:
    return target.writer.event("response.steer.accepted",
                               steer={"id": steer_id, "previous_response_id": target.writer.response_id})


def waiting_on(target: Steerable) -> list[dict[str, Any]]:
    """`required_input`'s stubs: the outputs of the client's tool calls the response ended with,
    which a successor must wait for (empty: it can follow at once)."""
    return [{"type": _OUTPUT_OF[item["type"]], "call_id": item["call_id"], "name": item["name"]}
            for item in target.writer.output if item.get("type") in _OUTPUT_OF]


_OUTPUT_OF = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}


def pending(target: Steerable, steer_id: str, required_input: list[dict[str, Any]]) -> Event:
    return target.writer.event("response.steer.pending", reason="waiting_for_required_input",
                               required_input=required_input,
                               steer={"id": steer_id, "previous_response_id": target.writer.response_id})


def failed(refused: SteerRefused, response_id: Any, steer_input: Any, *, steer_id: str | None = None,
           target: Steerable | None = None) -> Event:
    """`response.steer.failed`, returning the input as sent; numbered in the target's sequence
    when there is one, else 0."""
    steer: dict[str, Any] = {"previous_response_id": response_id, "input": steer_input}
    if steer_id is not None:
        steer["id"] = steer_id
    error = {"type": "invalid_request_error", "code": refused.code, "message": refused.message}
    if target is not None:
        return target.writer.event("response.steer.failed", steer=steer, error=error)
    return {"type": "response.steer.failed", "steer": steer, "error": error, "sequence_number": 0}


def _as_items(steer_input: Any) -> list[Any]:
    return [{"type": "message", "role": "user", "content": steer_input}] if isinstance(steer_input, str) \
        else list(steer_input)


def successor_body(target: Steerable) -> dict[str, Any]:
    """The automatic successor's `response.create`: the steered one's settings, continuing it,
    with the queued inputs in the order they came."""
    items = [item for _, steer_input in target.steers for item in _as_items(steer_input)]
    return {**target.body, "previous_response_id": target.writer.response_id, "input": items}


def with_pending(body: dict[str, Any], steers: list[tuple[str, Any]]) -> dict[str, Any]:
    """A `response.create` continuing a response whose steers wait for it: their inputs first."""
    own = body.get("input")
    own_items = ([] if own is None else _as_items(own)) if not isinstance(own, list) else own
    return {**body, "input": [*(item for _, steer_input in steers for item in _as_items(steer_input)), *own_items]}
