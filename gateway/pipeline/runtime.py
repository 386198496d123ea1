"""Everything a request needs that lives as long as the server: format, defaults, pool."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.core.image import ImageLimits
from gateway.core.sampling import GenerationDefaults
from gateway.formats.base import ChatFormat
from gateway.sessions.backend import MemoryState, StateStore
from gateway.sessions.conversations import ConversationStore, MemoryConversations
from gateway.sessions.responses import ResponseStore
from gateway.sessions.rollouts import RolloutStore
from gateway.sessions.session_store import SessionStore
from gateway.upstream.pool import Pool

__all__ = ["Runtime"]


@dataclass(eq=False)
class Runtime:
    model_name: str  # the name clients use
    format: ChatFormat
    defaults: GenerationDefaults
    pool: Pool
    sessions: SessionStore = field(default_factory=SessionStore)  # exact tokens by prompt_cache_key
    responses: ResponseStore = field(default_factory=ResponseStore)  # `store: true` responses by id
    rollouts: RolloutStore = field(default_factory=RolloutStore)  # RL trajectories by rollout_id
    # Where the three live for other requests: by default these very stores (in memory); with
    # --state-url, Redis, these being this process's cache of it. Only pipeline/session.py uses it.
    state_store: StateStore | None = None
    image_limits: ImageLimits = field(default_factory=ImageLimits)  # what a request may attach
    # /v1/conversations: in process, or beside the rest in Redis (only pipeline/conversations.py uses it).
    conversations: ConversationStore = field(default_factory=MemoryConversations)
    tokens_as_ids: bool = False  # --return-tokens-as-token-ids: logprobs `token`s are "token_id:N" by default

    def __post_init__(self) -> None:
        if self.state_store is None:
            self.state_store = MemoryState(self.sessions, self.responses, self.rollouts)

    @property
    def state(self) -> StateStore:
        assert self.state_store is not None, "set in __post_init__"
        return self.state_store

    @property
    def stop_token_ids(self) -> list[int]:
        ids = list(self.format.stop_token_ids)
        ids += [t for t in self.defaults.eos_token_ids if t not in ids]
        return ids
