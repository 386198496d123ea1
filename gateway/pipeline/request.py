"""A turn as every API asks for it: the canonical request an adapter hands the session module.

The adapters (Responses over HTTP, SSE and WebSocket, Chat Completions, Messages, token-in)
turn their API's body into this: the conversation and sampling, plus every source of exact earlier tokens
the request names. gateway/pipeline/session.py chooses among them; nothing below changes it.

A Responses body cannot be read whole without the stores (a resent history, `conversation`,
`previous_response_id`): its adapter hands the exchange a `Builder`, the exchange looks up what
the body names (`Named`) and hands back what it found (`Found`), and the builder finishes the request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.core.conversation import Conversation
from gateway.core.sampling import SamplingOptions
from gateway.formats.base import Covered
from gateway.pipeline.steering import Steering
from gateway.store.conversations import StoredConversation
from gateway.store.responses import CachedResponse, ResponseCache
from gateway.store.rollouts import Pending
from gateway.store.sessions import ResentPrefix, Session
from gateway.tokenfix.restore import Generated
from gateway.tokenfix.state import TokenState

__all__ = ["Builder", "Found", "InConversation", "Lane", "Named", "Recognised", "RolloutCall", "TokenIn", "TurnRequest"]


@dataclass(frozen=True, slots=True)
class Recognised:
    """A resent history the adapter matched to its session from the body's bytes."""

    state: TokenState  # the session's exact tokens…
    covered: Covered  # …and how far the history continues them
    resent: ResentPrefix  # where this body's items end, for the next resend


@dataclass(frozen=True, slots=True)
class Lane:
    """A WebSocket lane: the connection's cache and the lane's `stream_id`."""

    cache: ResponseCache
    stream_id: str | None


@dataclass(frozen=True, slots=True)
class InConversation:
    """The conversation (/v1/conversations) a response runs in, as the turn read it."""

    conversation_id: str  # as the client names it
    version: int  # the stored version read: the turn's tokens are kept only if it is still the latest
    tokens: TokenState | None  # the conversation's exact tokens, continued by this turn
    history_len: int  # the conversation's items come first in the turn's; the rest are new
    items: list[dict[str, Any]]  # this request's input items as the conversation keeps them


@dataclass(frozen=True, slots=True)
class RolloutCall:
    """The rollout a request names (`rollout_id`, `response_mask`): the exchange takes the call's
    place in it when it prepares the turn (gateway/pipeline/session.py `begin_rollout`)."""

    rollout_id: str  # as the client names it
    response_mask: list[int] | None = None


@dataclass(frozen=True, slots=True)
class TokenIn:
    """A token-in call (`/v1/completions`, `/inference/v1/generate`): the client's own body."""

    path: str
    body: dict[str, Any]  # as it goes to the replica (less the gateway's own fields)
    prompt_ids: Sequence[int] | None  # its prompt when it is ids (text is tokenized by the replica)
    # Resumed after the fleet's abort pause, spliced into one answer (a partial rollout: the
    # adapter checked that it can be done exactly; gateway/pipeline/partial_rollout.py).
    resumable: bool = False


@dataclass(frozen=True, slots=True)
class TurnRequest:
    conversation: Conversation
    sampling: SamplingOptions
    response_id: str | None = None  # the id the answer goes out under (Responses)
    # The session this turn continues and updates, one name from the edge down: `prompt_cache_key`
    # (Responses, Chat), Claude Code's session id (Messages), a token-in call's `session_id`.
    session_key: str | None = None
    previous: CachedResponse | None = None  # what `previous_response_id` named
    in_conversation: InConversation | None = None  # the `conversation` it runs in, appended to after it
    rollout: Pending | None = None  # the RL rollout this call is recorded in
    client_prefix: TokenState | None = None  # ids the client put on its last assistant message
    generated: Sequence[Generated] = ()  # ids sealed in the history's reasoning items
    recognised: Recognised | None = None
    # Where this request's items end in its body, computed only if the session is updated.
    resent: Callable[[], ResentPrefix | None] | None = None
    store: bool = False  # `store: true`: keep the response for `previous_response_id`
    lane: Lane | None = None  # WebSocket: the lane whose latest response this becomes
    connection_id: str | None = None  # WebSocket: its turns share a replica when nothing above names one
    # The request's max_tokens is a cap the context window may lower (Anthropic's, which Claude Code
    # sets to 32000 whatever the model), not a demand that fails when the prompt leaves less room.
    max_tokens_cap: bool = False
    spans: bool = False  # text deltas carry their tokens' output positions (per-part logprobs)
    truncate: bool = False  # `truncation: "auto"`: drop the oldest exchanges of a history too long to fit
    sample: int = 0  # sample i > 0 of `n` (Chat Completions) leaves only its rollout branch behind
    adapter: str | None = None  # the LoRA adapter `model` names: only the replicas holding it serve the turn
    token_in: TokenIn | None = None  # a token-in call: passed through, not rendered (gateway/pipeline/token_turn.py)
    steering: Steering | None = None  # WebSocket: the switch a `response.steer` stops the generation with


@dataclass(frozen=True, slots=True)
class Named:
    """What a body continues that only the stores hold, as the body names it (at most one)."""

    conversation_id: str | None = None  # `conversation` (/v1/conversations)
    previous_response_id: str | None = None
    cache: ResponseCache | None = None  # a WebSocket connection's: `previous_response_id` is looked for there first


@dataclass(frozen=True, slots=True)
class Found:
    """What the exchange found for a builder: the session its body resends (`Builder.resent` said so),
    or what `Builder.named` named (None: not named; a name not found is the builder's 400 to raise)."""

    resent: Session | None = None
    conversation: StoredConversation | None = None
    previous: CachedResponse | None = None


class Builder(Protocol):
    """An API's request read as far as its body goes without the stores; the exchange
    (gateway/pipeline/exchange.py `prepare_built`) looks up the rest, in this order: the session
    under `session_key` that the body may resend whole, else what `named` names."""

    session_key: str | None  # the session a body resent whole would continue (None: none to look up)

    def resent(self, found: Session) -> bool:
        """Whether the body continues `found`, the session under `session_key`, from the bytes it
        has in common with the request before. Pure: the exchange confirms the look with no await between."""

    def named(self) -> Named:
        """What the body continues when it resends no session (its 400s for a body that is not a request)."""

    async def request(self, found: Found) -> tuple[TurnRequest, RolloutCall | None]:
        """The request continuing what was found, and the rollout call it names."""
