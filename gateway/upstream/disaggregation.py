"""Prefill/decode disaggregation over vLLM's `kv_transfer_params` (NixlConnector).

A long prefill on a replica stalls every decode batched beside it. With replicas declared
`prefill=URL` / `decode=URL` (gateway/upstream/_discovery.py), a turn may run in two legs on the
same prompt ids: the prefill leg on a prefill replica (`max_tokens` 1, not streamed — vLLM
answers the transfer parameters only then — with `do_remote_decode`), whose answer's top-level
`kv_transfer_params` go verbatim with the decode leg, the turn's own request, to a decode
replica, which pulls the prompt's KV cache from the prefill replica and generates. The
gateway owns the ids, so both legs carry exactly the same ones; nothing is re-tokenized.

`open_legs` decides and runs the prefill leg, then opens the decode leg through the caller's
`send`. The decision (`SplitPolicy`): the decode replica is picked as every generation is (the
router's prefix index and load); when its prefix index says fewer than `min_new_tokens` of
the prompt are new — a continuing session on a cached history, or a short prompt — it prefills
locally ("cached", "short"). Otherwise the prefill replica is picked by its own prefix hit and
load, and the turn is "split". Every decision is counted (`SplitStats`) and logged.

Failures degrade to a local prefill, never to an error: a prefill leg that fails, times out
or answers no transfer parameters → the decode replica alone ("prefill_failed"); a decode
leg refused (a pull that failed before its headers, or the replica) → once more without the
parameters, wherever the pool sends it ("decode_refused"). A pull that fails after the
decode leg was accepted ends its stream with an error before any token: the turn retries it
as a local prefill (`Legs.retry`, "pull_failed"; gateway/pipeline/turn.py). The prefill
replica frees its blocks once the decode replica pulled them, or is told to when the decode
leg is aborted before it pulled (vLLM's NixlConnector does both); a prefill leg whose decode
leg never went out (the client left between the legs) is freed by the prefill replica's
lease (`kv_lease_duration`, 30 s by default).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import orjson

from gateway.core import tracing
from gateway.core.errors import APIError, UpstreamUnavailable
from gateway.upstream.prefix_index import KeyChain
from gateway.upstream.replica import Replica

__all__ = ["PREFILL_BUCKETS", "PREFILL_PARAMS", "Legs", "SplitPolicy", "SplitStats", "open_legs", "prefill_sampling"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# What asks a prefill replica (kv_producer) to keep the prompt's blocks for a decode replica.
PREFILL_PARAMS: dict[str, Any] = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                                  "remote_block_ids": None, "remote_host": None, "remote_port": None}
PREFILL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Sampling fields a one-token prefill must not carry (min_tokens > max_tokens is refused; the rest is work).
_NOT_PREFILL = ("min_tokens", "structured_outputs", "logprobs", "prompt_logprobs", "n", "stream_options")


@dataclass(frozen=True, slots=True)
class SplitPolicy:
    """`min_new_tokens`: split only when at least this many prompt tokens are new to the decode
    replica; `prefill_timeout`: seconds the prefill leg may take before the decode replica
    prefills alone."""

    min_new_tokens: int = 1024
    prefill_timeout: float = 60.0


@dataclass
class SplitStats:
    decisions: dict[str, int] = field(default_factory=dict)  # split | cached | short | no_prefill_replica
    fallbacks: dict[str, int] = field(default_factory=dict)  # prefill_failed | decode_refused | pull_failed
    prefill_buckets: list[int] = field(default_factory=lambda: [0] * (len(PREFILL_BUCKETS) + 1))
    prefill_seconds: float = 0.0  # the prefill legs' time, summed

    def decided(self, decision: str) -> None:
        self.decisions[decision] = self.decisions.get(decision, 0) + 1

    def fell_back(self, reason: str) -> None:
        self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1

    def prefilled(self, seconds: float) -> None:
        self.prefill_seconds += seconds
        self.prefill_buckets[sum(seconds > bound for bound in PREFILL_BUCKETS)] += 1


@dataclass
class Legs:
    """What one turn's disaggregation did: the request's access log and trace say it."""

    decision: str
    new_tokens: int  # prompt tokens the decode replica did not hold (as its prefix index knew)
    prefill: str | None = None  # the prefill replica's URL
    prefill_seconds: float | None = None
    fallback: str | None = None
    params: dict[str, Any] | None = None  # the prefill leg's kv_transfer_params, sent with the decode leg
    decode: Replica | None = None
    stats: SplitStats | None = None

    @property
    def retry(self) -> bool:
        """A decode leg that pulled may be retried once as a local prefill (its pull failed)."""
        return self.params is not None and self.fallback is None

    def retried(self) -> None:
        self.fallback = "pull_failed"
        if self.stats is not None:
            self.stats.fell_back("pull_failed")
        log.warning("decode replica %s could not pull the prompt from %s: prefilling it locally",
                    self.decode.url if self.decode else "?", self.prefill)

    def fields(self) -> dict[str, Any]:
        """For the access log and the generation's span."""
        out: dict[str, Any] = {"pd_decision": self.decision, "pd_new_tokens": self.new_tokens}
        if self.prefill is not None:
            out["pd_prefill_replica"] = self.prefill
        if self.prefill_seconds is not None:
            out["pd_prefill_seconds"] = round(self.prefill_seconds, 4)
        if self.fallback is not None:
            out["pd_fallback"] = self.fallback
        return out


def prefill_sampling(sampling: dict[str, Any]) -> dict[str, Any]:
    """A generation's sampling parameters as its prefill leg's: one token, the prefill request."""
    return {**{k: v for k, v in sampling.items() if k not in _NOT_PREFILL}, "max_tokens": 1,
            "kv_transfer_params": PREFILL_PARAMS}


Send = Callable[[Replica, "dict[str, Any] | None"], Awaitable[T]]
Prefill = Callable[[Replica], tuple[str, bytes]]  # a prefill leg's path and body for a replica


async def open_legs(pool: Any, send: Send[T], prefill_body: Prefill, request_id: str, affinity: str | None, *,
                    prompt_ids: Sequence[int], cache_salt: str | None = None,
                    keys: KeyChain | None = None) -> tuple[T, Legs | None]:
    """The generation `send` opens (with the transfer parameters, or None: a local prefill), on a
    decode replica, after a prefill leg (`prefill_body`: the body for a prefill replica) when the
    split is worth it. The pool (gateway/upstream/pool.py) is `pool`; its `disaggregated` False: as
    `pool.open` does, and no Legs. `keys`: the prompt's chunk keys, when the caller has them."""
    if keys is None:
        keys = pool.prompt_keys(prompt_ids, cache_salt=cache_salt)  # hashed once for both picks
    if not pool.disaggregated or not prompt_ids:
        return await pool.open(lambda r: send(r, None), request_id, affinity, prompt_ids=prompt_ids,
                               cache_salt=cache_salt, keys=keys), None
    await pool.barrier.passed()  # a paused fleet holds it here, as pool.open does (gateway/upstream/_barrier.py)
    policy: SplitPolicy = pool.split_policy
    stats: SplitStats = pool.split_stats
    decode = pool.pick(affinity, prompt_ids=prompt_ids, cache_salt=cache_salt, keys=keys)
    last = pool.router.last
    held = last.matched if last is not None and last.replica == decode.url else 0
    legs = Legs(_decision(pool, decode, held, len(prompt_ids), policy), max(len(prompt_ids) - held, 0),
                decode=decode, stats=stats)
    stats.decided(legs.decision)
    log.info("request %s: %s (%d of %d prompt tokens new to %s)", request_id, legs.decision, legs.new_tokens,
             len(prompt_ids), decode.url)
    if legs.decision == "split":
        prefiller = pool.pick(None, exclude=[decode], prompt_ids=prompt_ids, cache_salt=cache_salt, keys=keys,
                              leg="prefill")
        legs.prefill = prefiller.url
        legs.params = await _prefill(prefiller, prefill_body, request_id, policy, legs)
    try:
        return await send(decode, legs.params), legs
    except UpstreamUnavailable as exc:
        if legs.params is None:
            tried: Sequence[Replica] = [decode]
        else:  # maybe the pull, maybe the replica: once more as a local prefill, there or elsewhere
            tried = ()
            legs.fallback = "decode_refused"
            stats.fell_back(legs.fallback)
        log.warning("request %s: decode replica %s: %s; prefilling locally", request_id, decode.url, exc.message)
        legs.params = None
    return await _open_local(pool, send, request_id, affinity, prompt_ids, cache_salt, keys, tried), legs


def _decision(pool: Any, decode: Replica, held: int, n_prompt: int, policy: SplitPolicy) -> str:
    if n_prompt - held < policy.min_new_tokens:
        return "cached" if held else "short"
    if not any(r.healthy and r.serves("prefill") and r is not decode for r in pool.replicas):
        return "no_prefill_replica"
    return "split"


async def _open_local(pool: Any, send: Send[T], request_id: str, affinity: str | None, prompt_ids: Sequence[int],
                      cache_salt: str | None, keys: KeyChain | None, tried: Sequence[Replica]) -> T:
    async def local(replica: Replica) -> T:
        if replica in tried:
            raise UpstreamUnavailable(f"replica {replica.url} refused the request already")
        return await send(replica, None)

    return await pool.open(local, request_id, affinity, prompt_ids=prompt_ids, cache_salt=cache_salt, keys=keys)


async def _prefill(replica: Replica, prefill_body: Prefill, request_id: str, policy: SplitPolicy,
                   legs: Legs) -> dict[str, Any] | None:
    """The prefill leg on `replica`: its answer's kv_transfer_params, or None (counted, logged)
    when it failed — the decode replica then prefills alone."""
    started = time.perf_counter()
    replica.inflight += 1
    replica.requests += 1
    failure: str | None = None
    params: dict[str, Any] | None = None
    try:
        with tracing.span("gateway.prefill", {"replica": replica.url}):
            async with asyncio.timeout(policy.prefill_timeout):
                path, body = prefill_body(replica)
                response = await replica.client.post(
                    replica.url + path, content=body, timeout=policy.prefill_timeout,
                    headers={"content-type": "application/json", **tracing.propagation_headers()})
        if response.status_code != 200:
            failure = f"answered {response.status_code}: {response.text[:300]}"
        else:
            params = orjson.loads(response.content).get("kv_transfer_params")
            if not isinstance(params, dict) or not params.get("do_remote_prefill"):
                failure = "answered no kv_transfer_params (is it a kv_producer?)"
                params = None
    except TimeoutError:
        failure = f"no answer within {policy.prefill_timeout:g} s"
    except (httpx.HTTPError, APIError, ValueError, AttributeError) as exc:
        failure = repr(exc)
    finally:
        replica.inflight -= 1
    seconds = time.perf_counter() - started
    if failure is None:
        legs.prefill_seconds = seconds
        if legs.stats is not None:
            legs.stats.prefilled(seconds)
        return params
    replica.ended(f"prefill leg: {failure}")
    legs.fallback = "prefill_failed"
    if legs.stats is not None:
        legs.stats.fell_back(legs.fallback)
    log.warning("request %s: prefill replica %s %s; the decode replica prefills alone", request_id, replica.url,
                failure)
    return None

