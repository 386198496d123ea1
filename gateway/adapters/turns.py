"""Each API's builder, Responses' aside (gateway/adapters/responses/turn.py): its parsed request as
a `TurnRequest`, prepared by the exchange (gateway/pipeline/exchange.py `prepare`).

A route parses its body and hands the parsed request here; the builder resolves the model (a LoRA
adapter it names), says which session the turn belongs to (the one session key of each API:
`prompt_cache_key`, Claude Code's session id, a token-in call's `session_id`) and which rollout
it is recorded in, and the exchange does the rest: the rollout call, the exact tokens the prompt
continues, the replica affinity. No builder reads or writes a store itself.
"""

from __future__ import annotations

from typing import Any

from gateway.adapters.anthropic.input import MessagesRequest
from gateway.adapters.chat.input import ChatRequest
from gateway.adapters.rollout_fields import rollout_call
from gateway.adapters.token_in import TokenInRequest, resumable
from gateway.adapters.validation import check_model
from gateway.core.conversation import Conversation
from gateway.core.sampling import SamplingOptions
from gateway.pipeline import exchange
from gateway.pipeline.request import TokenIn, TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.turn import Turn

__all__ = ["chat_turns", "message_turn", "token_in_turn"]


async def chat_turns(runtime: Runtime, body: dict[str, Any], parsed: ChatRequest) -> list[Turn]:
    """A Chat Completions request's `n` turns (one prompt; with a `rollout_id`, each sample in its
    own branch of the rollout)."""
    adapter = check_model(runtime.model_name, parsed.model, runtime.pool.adapters)
    rollout = rollout_call(body)
    request = TurnRequest(parsed.conversation, parsed.sampling, session_key=parsed.prompt_cache_key,
                          client_prefix=parsed.client_prefix, adapter=adapter,
                          spans=parsed.stream and (parsed.logprobs or parsed.return_token_ids))  # per chunk
    return await exchange.prepare_samples(runtime, request, rollout, n=parsed.n)


async def message_turn(runtime: Runtime, parsed: MessagesRequest) -> Turn:
    """A Messages request's turn, under Claude Code's session (a subagent's own); its `max_tokens` is
    a cap the context window may lower."""
    adapter = check_model(runtime.model_name, parsed.model, runtime.pool.adapters)
    return await exchange.prepare(runtime, TurnRequest(parsed.conversation, parsed.sampling,
                                                       session_key=parsed.session_key, generated=parsed.generated,
                                                       max_tokens_cap=True, adapter=adapter))


async def token_in_turn(runtime: Runtime, parsed: TokenInRequest, path: str) -> Turn:
    """A token-in call's turn (`path`: /v1/completions or /inference/v1/generate): passed through,
    routed and recorded as every turn."""
    adapter = check_model(runtime.model_name, parsed.model, runtime.pool.adapters)
    resume = resumable(parsed, path, default=runtime.partial_rollouts)
    rollout = rollout_call({"rollout_id": parsed.rollout_id}) if parsed.rollout_id else None
    request = TurnRequest(Conversation(items=[]), SamplingOptions(), session_key=parsed.session_key, adapter=adapter,
                          token_in=TokenIn(path, parsed.body, parsed.prompt_ids, resumable=resume))
    return await exchange.prepare(runtime, request, rollout)


