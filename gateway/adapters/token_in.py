"""vLLM's token-in endpoints as clients call them: `POST /v1/completions` and
`POST /inference/v1/generate` bodies read for the gateway, and their answers written back as
the replica gave them (gateway/pipeline/token_turn.py passes them through).

The body is vLLM's to check (a replica answers what is wrong with it, and the client hears
that answer); the gateway reads only what it acts on: the model, whether it streams, the
prompt's ids (for routing and the rollout), and its own fields, which it takes out before
forwarding — `rollout_id` names the rollout the call is recorded in (else the `X-Session-ID`
header, SkyRL's); the body's `session_id` is its session key, which (after the rollout) routes
the call to the replica holding its cache. The turn is prepared as every API's
(gateway/pipeline/session.py `prepare`). `partial_rollout` asks for (true) or declines (false)
the resumption of a generation the fleet's abort pause cuts (gateway/pipeline/partial_rollout.py;
`--partial-rollouts` makes it the default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.adapters.request_schema import TokenInFields, validate
from gateway.core.errors import APIError, invalid_request
from gateway.core.push import Hold, Sink
from gateway.pipeline.exchange import Quiet
from gateway.pipeline.partial_rollout import refusal
from gateway.pipeline.token_turn import COMPLETIONS, GENERATE
from gateway.pipeline.turn import Turn

__all__ = ["BodyWriter", "EventsWriter", "TokenInRequest", "parse_token_in", "resumable"]

_GATEWAY_FIELDS = ("rollout_id", "partial_rollout")


@dataclass(frozen=True, slots=True)
class TokenInRequest:
    body: dict[str, Any]  # what goes to the replica
    model: str
    stream: bool
    prompt_ids: list[int] | None  # the prompt, when it is one list of ids
    rollout_id: str | None
    session_key: str | None  # the body's `session_id`: same session, same replica
    partial_rollout: bool | None = None  # the client's opt-in (True), opt-out (False), or the gateway's default


def parse_token_in(body: Any, path: str, *, model: str, session: str | None) -> TokenInRequest:
    """`model`: the served model (vLLM's default when the body names none); `session`: the
    `X-Session-ID` header."""
    fields = validate(TokenInFields, body)
    name = fields.model or model
    rollout_id = fields.rollout_id or session
    prompt = body.get("token_ids") if path == GENERATE else body.get("prompt")
    prompt_ids = prompt if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt) else None
    if rollout_id is not None and path == COMPLETIONS and prompt_ids is None and not isinstance(prompt, str):
        raise invalid_request("A call recorded in a rollout has one prompt (text or ids), not a batch.",
                              param="prompt", code="invalid_value")
    forward = {key: value for key, value in body.items() if key not in _GATEWAY_FIELDS}
    return TokenInRequest(body=forward, model=name, stream=body.get("stream") is True, prompt_ids=prompt_ids,
                          rollout_id=rollout_id, session_key=fields.session_id, partial_rollout=fields.partial_rollout)

def resumable(request: TokenInRequest, path: str, *, default: bool) -> bool:
    """Whether a generation the fleet's abort pause cuts is resumed (`default`: --partial-rollouts).
    Asked for and impossible to do exactly: a 400 saying why; only defaulted to: vLLM's abort."""
    asked = request.partial_rollout
    if asked is False or (asked is None and not default):
        return False
    if path != GENERATE:
        why: tuple[str, str] | None = ("partial_rollout", (f"it is served on {GENERATE} only ({path} answers "
                                                           "text, whose detokenization cannot be spliced exactly)"))
    else:
        why = refusal(request.body) if request.prompt_ids is not None else ("token_ids", "the prompt is not token ids")
    if why is None:
        return True
    if asked:
        param, reason = why
        raise invalid_request(f"This generation cannot be resumed exactly after an abort pause "
                              f"('partial_rollout': true): '{param}': {reason}.", param=param,
                              code="partial_rollout_unsupported")
    return False


class EventsWriter:
    """A streamed answer: the replica's events as it sent them, then `[DONE]`."""

    keeps = True

    def __init__(self, emit: Sink[bytes]) -> None:
        self.emit = emit
        self._started = False

    def started(self, turn: Turn) -> Hold:
        self._started = True
        return None

    def events(self, payloads: list[bytes]) -> Hold:
        return self.emit(b"".join(b"data: " + payload + b"\n\n" for payload in payloads))

    def answer(self, turn: Turn) -> None:
        return None

    def ended(self, turn: Turn) -> Hold:
        return self.emit(b"data: [DONE]\n\n")

    def failed(self, turn: Turn, error: APIError) -> Hold:
        if not self._started:
            raise error  # nothing went out: an HTTP error
        return self.emit(b"data: " + orjson.dumps(error.http_body()) + b"\n\ndata: [DONE]\n\n")


class BodyWriter(Quiet):
    """A JSON answer: the replica's body, once it ended."""

    body = b""

    def events(self, payloads: list[bytes]) -> Hold:  # type: ignore[override]
        self.body = payloads[-1]
        return None
