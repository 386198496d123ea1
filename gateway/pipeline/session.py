"""The session pipeline: which exact tokens a turn continues, and what it leaves behind.

Every API's turn — Responses (JSON, SSE, WebSocket), Chat Completions, Messages, token-in —
is prepared here when the exchange (gateway/pipeline/exchange.py) prepares it, and what it
leaves behind is written here when the exchange commits or forgets it; no transport touches
a store.

`prepare(runtime, request)` makes every API's turn, token-in's too (which continues nothing:
the client sends its own prompt, gateway/pipeline/token_turn.py): the same replica affinity
(the rollout's, else the session key's, else the connection's) and the same rollout recording.
For a rendered turn it chooses the exact earlier tokens the prompt continues, in this order
(the first that applies):
1. ids the client sent on its last assistant message (`prompt_token_ids` +
   `generation_token_ids`, NeMo-RL's convention): the client's word is the most specific,
   once checked against the history they claim to cover (gateway/tokenfix/client_ids.py;
   ids that do not fit: the prompt is rendered in full and flagged `non_monotonic`);
2. the response `previous_response_id` names (the connection's cache, else the
   `store: true` store);
   or the `conversation` it runs in (gateway/pipeline/conversations.py);
3. the rollout's exact tokens (`rollout_id`);
4. the `prompt_cache_key` session: as the adapter recognised it from the resent body's
   bytes (then already checked this far), else looked up;
then the ids of the turns the history's reasoning items name extend that prefix over the turns
it does not cover (gateway/tokenfix/restore.py), so a history no cache holds is still exact:
each turn's generated ids are kept in the session store under its response id (`turn_ids`),
which the first reasoning item's blob names (gateway/adapters/reasoning_blob.py).
Whether the history really continues the prefix is the prompt decision's business
(gateway/tokenfix/prompt.py), at `Turn.start()`.

`commit(turn)` records a turn that ended normally: the session under its key, the ids of a
turn with reasoning under its response id, its conversation's new items, its rollout, the stored response (`store: true`) and the WebSocket lane's latest response.
A turn that failed commits nothing — `forget` drops the lane's response, as the
WebSocket spec wants — so a retry finds everything as it was.

The stores are `runtime.store` (gateway/store/backend.py): in this process, or shared
through Redis by every gateway process (`--state-url`); hence the awaits. This module is their
door: nothing else writes them (gateway/pipeline/conversations.py writes the conversations),
and what a turn leaves behind — `commit`, `forget`, a tool loop's `commit_generation`, a
`warm_up`, a background response's `store_snapshot` — is written only when the exchange
(gateway/pipeline/exchange.py) calls; scripts/check_stores.py holds gateway/ to both rules.
/metrics and /status read the stores' figures directly.

Every key a client chooses (`prompt_cache_key`, `rollout_id`, a stored response's id) is
the caller's tenant's (gateway/core/tenancy.py): it is stored and looked up here, and only
here, as `scoped(key)`, so another tenant's key is an unknown one, in memory and in Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from gateway.core import tracing
from gateway.core.conversation import Item, Reasoning
from gateway.core.errors import APIError, context_length_exceeded
from gateway.core.tenancy import scoped, tenant_prefix
from gateway.formats.base import Covered
from gateway.formats.length import too_long
from gateway.pipeline import conversations, trace
from gateway.pipeline.request import Lane, TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.token_turn import TokenTurn
from gateway.pipeline.turn import Turn
from gateway.store.observer import FALLBACK
from gateway.store.responses import CachedResponse, ResponseCache
from gateway.store.rollouts import Pending
from gateway.store.sessions import Session
from gateway.tokenfix import client_ids
from gateway.tokenfix.restore import restore, uncovered
from gateway.tokenfix.state import TokenState

__all__ = ["begin_rollout", "branch_id", "branch_rollout", "commit", "commit_generation", "confirm", "delete_rollout",
           "delete_stored", "export_rollout", "forget", "prepare", "previous_response", "prompt_ids", "recall", "rollout_summary",
           "store_snapshot", "stored", "warm_up"]

log = logging.getLogger(__name__)

TURN_IDS = "turn-ids:"  # session store key prefix: a turn's exact tokens, by response id


async def prepare(runtime: Runtime, request: TurnRequest) -> Turn:
    """The turn for `request`, continuing the exact tokens chosen as above (not started)."""
    with tracing.phase("gateway.prepare"):
        return await _prepare(runtime, request)


async def _prepare(runtime: Runtime, request: TurnRequest) -> Turn:
    if request.token_in is not None:  # nothing to continue: the client sends its own prompt
        token_turn = TokenTurn(runtime, request, affinity=_affinity(request))
        trace.attach(token_turn.record)
        return token_turn
    FALLBACK.set(None)
    rejected = None  # why the client's own ids do not cover the history (then the prompt is rendered in full)
    client = request.client_prefix if not _own(request) else None  # the rollout's own state checks itself
    if client is not None:
        rejected = await asyncio.to_thread(client_ids.mismatch, runtime.format, request.conversation, client)
    prefix, covered = (None, None) if rejected else await _prefix(runtime, request, client)
    degraded = FALLBACK.get() if prefix is None else None
    if turns := await _known(runtime, uncovered(request.conversation, request.generated, prefix)):
        prefix = await asyncio.to_thread(restore, runtime.format, request.conversation, turns, prefix)
        covered = None  # that was for the prefix before
    sampling = request.sampling
    if request.rollout is not None and sampling.logprobs is None:
        sampling = dataclasses.replace(sampling, logprobs=0)  # trajectories carry the sampled tokens' logprobs
    turn = Turn(runtime, request, sampling=sampling, prefix=prefix, covered=covered, affinity=_affinity(request))
    turn.record.degraded = degraded  # the shared store may hold exact tokens it could not give
    turn.record.client_ids_mismatch = rejected
    trace.attach(turn.record)
    return turn


def _affinity(request: TurnRequest) -> str | None:
    """The key a turn's replica is chosen by: its rollout's (a branch's parent's: all samples on one
    replica), else its session's, else its WebSocket connection's."""
    rollout = request.rollout
    rollout_id = (rollout.fork_from or rollout.rollout_id) if rollout is not None else None
    return rollout_id or request.session_key or request.connection_id


async def prompt_ids(runtime: Runtime, request: TurnRequest) -> Sequence[int]:
    """The prompt a turn for `request` sends, sending nothing (vLLM's /tokenize of a conversation):
    when `request` is exactly the history the exact tokens it continues were generated from (the
    call just made, asked about again), that call's prompt; else what `prepare` and the render give."""
    turn = await prepare(runtime, request)
    prefix = turn.record.prefix
    if prefix is not None and (sent := prefix.prompt_of(request.conversation)) is not None:
        return sent
    return await turn.render()


def _own(request: TurnRequest) -> bool:
    """The client's ids are the rollout's own last call: its state, whose digest checks the
    history the usual way, is offered instead (no render to check them)."""
    own = request.rollout.prefix if request.rollout is not None else None
    theirs = request.client_prefix
    return own is not None and theirs is not None and own.prompt_len == theirs.prompt_len \
        and own.tokens == theirs.tokens


async def _known(runtime: Runtime, turns: list[tuple[int, Sequence[int] | str]]) -> list[tuple[int, Sequence[int]]]:
    """The turns' generated ids: sealed in the blob, or kept under the turn's response id; a
    turn whose ids are gone is rendered from its items."""
    known = []
    for index, ids in turns:
        if isinstance(ids, str):
            kept = await runtime.store.session(scoped(TURN_IDS + ids), count=False)
            if kept is None:
                log.info("the ids of turn %s are no longer kept: it is rendered from its items", ids)
                continue
            ids = kept.state.tokens[kept.state.prompt_len:]
        known.append((index, ids))
    return known


async def _prefix(runtime: Runtime, request: TurnRequest, client: TokenState | None
                  ) -> tuple[TokenState | None, Covered | None]:
    if client is not None:
        return client, None
    if request.previous is not None and request.previous.tokens is not None:
        return request.previous.tokens, None
    if request.in_conversation is not None and request.in_conversation.tokens is not None:
        return request.in_conversation.tokens, None
    if request.rollout is not None and request.rollout.prefix is not None:
        return request.rollout.prefix, None
    if request.recognised is not None:
        return request.recognised.state, request.recognised.covered
    session = await recall(runtime, request.session_key) if request.session_key else None
    return (session.state if session is not None else None), None


async def commit(turn: Turn, response: dict[str, Any] | None = None, *, after: Sequence[Item] = ()) -> None:
    """Record what a turn that ended normally leaves behind; `response`: the Response object
    answered (Responses API), kept with a stored response. Sample i > 0 of `n` leaves only
    its rollout branch: the session continues the first. `after`: items that follow the turn's
    output in the history though no generation saw them (outputs of tools the gateway ran
    last): a continuation renders them after the turn's exact tokens. gateway/pipeline/exchange.py
    is the one caller."""
    runtime, request, record = turn.runtime, turn.request, turn.record
    state = record.token_state(runtime.format.turn_terminators)
    if record.truncated_items and state is not None:  # its tokens are of a shorter history than the client's
        if request.rollout is not None:
            await runtime.store.commit_rollout(request.rollout, record, state)
        state = None
        request = dataclasses.replace(request, session_key=None, rollout=None)
    if request.sample > 0:
        if request.rollout is not None and state is not None:
            await runtime.store.commit_rollout(request.rollout, record, state)
        return
    if state is not None and request.response_id is not None and _reasoned(record.output_items):
        # for the reasoning blobs that name the turn
        await runtime.store.put_session(scoped(TURN_IDS + request.response_id), Session(state))
    if request.session_key and state is not None:
        resent = request.recognised.resent if request.recognised is not None else (
            request.resent() if request.resent is not None else None)
        await runtime.store.put_session(scoped(request.session_key), Session(state, resent), record)
    if request.rollout is not None and state is not None:
        await runtime.store.commit_rollout(request.rollout, record, state)
    if request.in_conversation is not None:
        await _append_to_conversation(runtime, request, [*record.turn_items, *after], state, response)
    if request.store or request.lane is not None:
        assert request.response_id is not None, "a stored response needs its id"
        history = dataclasses.replace(request.conversation, items=[*request.conversation.items, *record.turn_items,
                                                                   *after])
        await _remember(runtime, request, CachedResponse(request.response_id, history, state, response=response,
                                                         inputs=len(request.conversation.items)))


async def _append_to_conversation(runtime: Runtime, request: TurnRequest, turn_items: Sequence[Item],
                                  state: TokenState | None, response: dict[str, Any] | None) -> None:
    """The response's input and output items follow the conversation's, its tokens become the conversation's."""
    place = request.in_conversation
    assert place is not None
    output = [dict(item) for item in response["output"]] if response is not None else []
    history = [*request.conversation.items[place.history_len:], *turn_items]
    await conversations.append_turn(runtime, place.conversation_id, place.version, [*place.items, *output],
                                    history, state)


def _reasoned(items: Sequence[object]) -> bool:
    return any(isinstance(item, Reasoning) for item in items)


async def warm_up(runtime: Runtime, request: TurnRequest) -> int:
    """WebSocket `generate: false`: remember the conversation for the next request and
    generate nothing. Nothing new was generated, so the exact tokens to continue are still
    the previous response's. Returns the prompt's size (rendered only to report it).
    gateway/pipeline/exchange.py is the one caller."""
    limit = runtime.pool.max_model_len
    if limit is not None and (bound := too_long(request.conversation, runtime.format.max_token_bytes, limit - 1)):
        raise context_length_exceeded(bound, limit, 1, at_least=True)  # before rendering it
    try:
        prompt = await asyncio.to_thread(runtime.format.render, request.conversation)
    except APIError:  # a template that wants a user query (Qwen3.6's) before Codex's prewarm has one
        prompt = []
    assert request.response_id is not None, "a warmup is remembered under its response id"
    previous = request.previous.tokens if request.previous is not None else None
    await _remember(runtime, request, CachedResponse(request.response_id, request.conversation, previous))
    return len(prompt)


async def _remember(runtime: Runtime, request: TurnRequest, response: CachedResponse) -> None:
    """The response becomes its lane's latest (WebSocket) and, with `store: true`, stored."""
    if request.lane is not None:
        request.lane.cache.put(request.lane.stream_id, response)
    if request.store:
        await runtime.store.put_response(dataclasses.replace(response, response_id=scoped(response.response_id)))


def forget(lane: Lane | None) -> None:
    """A turn on `lane` failed (or could not be made): the lane's latest response is gone (a
    continuation must not build on it). gateway/pipeline/exchange.py is the one caller."""
    if lane is not None:
        lane.cache.evict(lane.stream_id)


async def commit_generation(turn: Turn) -> Pending | None:
    """A generation of a response that goes on after the gateway ran its tools: recorded as one
    call of its rollout, before the next begins (the whole response is one trajectory); the
    rollout's place for that next call, or None without a rollout. gateway/pipeline/exchange.py
    is the one caller."""
    runtime, record, rollout = turn.runtime, turn.record, turn.request.rollout
    state = record.token_state(runtime.format.turn_terminators)  # None only for an unfinished turn
    if rollout is None or state is None:
        return rollout
    await runtime.store.commit_rollout(rollout, record, state)
    return await runtime.store.begin_rollout(rollout.rollout_id, None)


async def previous_response(runtime: Runtime, response_id: str, cache: ResponseCache | None = None
                            ) -> CachedResponse | None:
    """The response `previous_response_id` names: the connection's latest of any lane, else a
    stored one."""
    found = cache.find(response_id) if cache is not None else None  # the connection is one tenant's
    return found if found is not None else await stored(runtime, response_id)


async def stored(runtime: Runtime, response_id: str) -> CachedResponse | None:
    """A `store: true` response of the caller's (GET /v1/responses/{id}, its input items)."""
    found = await runtime.store.response(scoped(response_id))
    return dataclasses.replace(found, response_id=response_id) if found is not None else None


async def store_snapshot(runtime: Runtime, request: TurnRequest, response: dict[str, Any]) -> None:
    """A background response's state while it runs (or after it failed or was cancelled):
    answered by GET, not continuable (no tokens). gateway/pipeline/exchange.py is the one caller."""
    assert request.response_id is not None
    await runtime.store.put_response(CachedResponse(scoped(request.response_id), request.conversation, None,
                                                    response=response, inputs=len(request.conversation.items)))


async def delete_stored(runtime: Runtime, response_id: str) -> bool:
    return await runtime.store.delete_response(scoped(response_id))


async def recall(runtime: Runtime, session_key: str, *, count: bool = True) -> Session | None:
    """The session under `session_key`; `count=False` looks without counting a hit or a miss,
    refreshing or expiring it (for a look that may be followed by the real one)."""
    return await runtime.store.session(scoped(session_key), count=count)


def confirm(runtime: Runtime, session_key: str, found: Session) -> bool:
    """`found`, from a `recall(session_key, count=False)` with no await since, is the session under it:
    counted as a hit and kept fresh. In this process only: the look before asked the shared
    store already (a second round trip would learn nothing new)."""
    return runtime.store.sessions.get(scoped(session_key)) is found


async def begin_rollout(runtime: Runtime, rollout_id: str, response_mask: list[int] | None) -> Pending:
    """A call's place in the tenant's rollout `rollout_id` (new or live); 410 if it is gone."""
    with _client_ids(rollout_id):
        return await runtime.store.begin_rollout(scoped(rollout_id), response_mask)


def branch_id(rollout_id: str, sample: int) -> str:
    """The rollout sample `sample` of `n` is recorded in (Chat `n` > 1 with a `rollout_id`)."""
    return f"{rollout_id}:{sample}"


async def branch_rollout(runtime: Runtime, pending: Pending, rollout_id: str, sample: int) -> Pending:
    """The call `pending` as sample `sample`: its own rollout, a copy of `rollout_id`'s so far plus
    this sample. 409 if that branch exists already, 410 if it was deleted (a branch is one trajectory)."""
    branch = branch_id(rollout_id, sample)
    with _client_ids(branch):
        found = await runtime.store.begin_rollout(scoped(branch), None)
    if found.rollout is not None:
        raise APIError(f"Rollout '{branch}' exists already: sample {sample} of rollout '{rollout_id}' is recorded "
                       f"there. Use another rollout_id (a branch is one trajectory).", status=409, param="rollout_id",
                       code="rollout_branch_exists")
    return pending.branch(scoped(branch))


async def export_rollout(runtime: Runtime, rollout_id: str) -> dict[str, Any]:
    with _client_ids(rollout_id):
        return {**await runtime.store.export_rollout(scoped(rollout_id)), "id": rollout_id}


async def delete_rollout(runtime: Runtime, rollout_id: str) -> None:
    with _client_ids(rollout_id):
        await runtime.store.delete_rollout(scoped(rollout_id))


async def rollout_summary(runtime: Runtime) -> dict[str, Any]:
    """The store's figures; a tenant's own rollouts and tokens only (the counters are everyone's)."""
    return await runtime.store.rollout_summary(tenant_prefix())


@contextlib.contextmanager
def _client_ids(rollout_id: str) -> Iterator[None]:
    """Errors name the rollout as its client does, not as it is stored."""
    try:
        yield
    except APIError as exc:
        exc.message = exc.message.replace(scoped(rollout_id), rollout_id)
        raise
