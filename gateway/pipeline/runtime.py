"""Everything a request needs that lives as long as the server: format, defaults, pool."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.core.image import ImageLimits
from gateway.core.sampling import GenerationDefaults
from gateway.core.service_tier import FairShare
from gateway.formats.base import ChatFormat
from gateway.pipeline.gate import OPEN, Gate
from gateway.store.backend import MemoryStore, Store
from gateway.store.conversations import ConversationStore, MemoryConversations
from gateway.upstream.pool import Pool

__all__ = ["Runtime"]


@dataclass(eq=False)
class Runtime:
    model_name: str  # the name clients use
    format: ChatFormat
    defaults: GenerationDefaults
    pool: Pool
    # Sessions by prompt_cache_key, `store: true` responses, RL rollouts: in this process by
    # default; with --state-url in Redis, the store's in-process ones its cache of it. Only
    # pipeline/session.py reads or writes it.
    store: Store = field(default_factory=MemoryStore)
    image_limits: ImageLimits = field(default_factory=ImageLimits)  # what a request may attach
    # /v1/conversations: in process, or beside the rest in Redis (only pipeline/conversations.py uses it).
    conversations: ConversationStore = field(default_factory=MemoryConversations)
    # Generations in flight per session: the replica priority that shares a tier fairly.
    fair_share: FairShare = field(default_factory=FairShare)
    # The budgets every generation passes (gateway/pipeline/gate.py): the server sets its own at start.
    gate: Gate = OPEN
    tool_grammars: bool = True  # custom tools' grammars enforced on their input (--no-tool-grammars: not)
    tokens_as_ids: bool = False  # --return-tokens-as-token-ids: logprobs `token`s are "token_id:N" by default
    # --cache-salt-by-weight-version: a generation without a `cache_salt` gets its replica's weight version
    # as one, so no prompt reuses KV blocks computed by earlier weights (prime-rl's and SkyRL's practice).
    salt_by_version: bool = False
    # --partial-rollouts: a generate call the fleet's abort pause cuts is resumed after the resume
    # when that can be done exactly (gateway/pipeline/partial_rollout.py); a request may say otherwise.
    partial_rollouts: bool = False

    @property
    def stop_token_ids(self) -> list[int]:
        ids = list(self.format.stop_token_ids)
        ids += [t for t in self.defaults.eos_token_ids if t not in ids]
        return ids
