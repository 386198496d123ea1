"""The fleet's control plane: vLLM's RL and dev endpoints, sent to every replica at once.

An RL trainer drives one vLLM server through its dev endpoints (`VLLM_SERVER_DEV_MODE=1`:
vllm/entrypoints/rl/online/api_router.py, vllm/entrypoints/serve/dev/): pause, push weights,
label them, resume. vLLM's docs leave the fan-out to whoever runs several servers behind a load
balancer; here the gateway is that balancer, so each call goes to every member replica at
once and their answers come back as one answer in vLLM's own shape. Calls are concurrent
(never one after another: NCCL's receivers block inside `/init_weight_transfer_engine` and
`/update_weights` until the trainer broadcasts, so a sequential fan-out would deadlock) and
bounded by `timeout`. Pause, resume and the read-only calls are retried when a replica could
not be reached or answered 502-504 (not when it timed out: it may still be doing it); calls that
change weights never are.

What the gateway learns on the way is kept on each replica: its weight version (vLLM's label,
"default" until a trainer sets one), its adapters, and whether it is `fenced` — out of routing
because a weight call failed on it or it missed the fleet's version, until an update brings it
to the fleet's version. Pausing closes the pool's barrier (gateway/upstream/_barrier.py) and
resuming opens it once every replica answered. A reset of a replica's caches clears the
router's index of it (gateway/upstream/router.py), so routing never counts on blocks it lost,
and so does a change of its weights, so routing never counts on blocks computed with the weights
before. A trainer's weight calls through `/collective_rpc` (its worker extension's methods)
keep these books as the weight endpoints they stand for do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from gateway.core.errors import APIError, invalid_request
from gateway.upstream.pool import Pool
from gateway.upstream.protocol import engine_request_id
from gateway.upstream.replica import Replica

__all__ = ["Answer", "Fleet", "FleetError"]

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({502, 503, 504})
# Worker methods a trainer calls through `/collective_rpc` that start a weight update or change the
# weights, by their names: vLLM's own (vllm/v1/worker/gpu_worker.py: `reload_weights`, and the
# `start_weight_update`/`update_weights`/`finish_weight_update` its endpoints run), SkyRL's worker
# extensions (NovaSky-AI/SkyRL new_inference_worker_wrap.py: `skyrl_start_weight_update`,
# `update_weights_ipc`, `update_weights_nccl`, `skyrl_finish_weight_update`; vllm_worker.py:
# `load_weights`), NeMo-RL's `update_weights_from_*`, open-instruct's `update_weight`, TRL's
# `update_named_param`.
_STARTS_UPDATE = frozenset({"start_weight_update", "start_draft_weight_update"})
_CHANGES_WEIGHTS = ("update_weight", "load_weight", "reload_weight", "finish_weight_update",
                    "finish_draft_weight_update", "update_named_param")
_RELOADS_WHOLE = "reload_weights"  # the model's whole checkpoint, loaded again from disk


def rpc_kind(method: str) -> str | None:
    """What a `/collective_rpc` method does to the weights, as the weight endpoint it stands for:
    "start" (`/start_weight_update`), "change" (`/update_weights`, `/finish_weight_update`),
    "reload" (all of them at once), or None (anything else: the gateway keeps nothing about it)."""
    name = method.removeprefix("skyrl_")
    if name in _STARTS_UPDATE:
        return "start"
    if name == _RELOADS_WHOLE:
        return "reload"
    return "change" if name.startswith(_CHANGES_WEIGHTS) else None


@dataclass(slots=True)
class Answer:
    """One replica's answer to a fanned-out call."""

    replica: Replica
    status: int | None  # None: no answer (unreachable, timed out)
    body: Any = None  # its JSON (or its text when it is not JSON)
    error: str | None = None  # why there is no 200

    @property
    def ok(self) -> bool:
        return self.status == 200


class FleetError(APIError):
    """Some replicas did not do what was asked: 502 naming each and why (504 if one timed out)."""

    def __init__(self, action: str, failed: Sequence[Answer], total: int) -> None:
        timed_out = any(a.status is None and "timed out" in (a.error or "") for a in failed)
        reasons = "; ".join(f"{a.replica.url}: {a.error}" for a in failed)
        super().__init__(f"{action} failed on {len(failed)} of {total} replicas ({reasons}).",
                         status=504 if timed_out else 502, type="server_error",
                         code="fleet_timeout" if timed_out else "fleet_partial_failure")
        self.failed = [a.replica.url for a in failed]


class Fleet:
    def __init__(self, pool: Pool, *, timeout: float = 300.0, retries: int = 2) -> None:
        """`timeout`: seconds one replica may take to answer a call (a `wait` pause, an NCCL
        rendezvous); `retries`: extra tries of a call that may be repeated."""
        self.pool = pool
        self.timeout = timeout
        self.retries = retries
        self.dirty: set[str] = set()  # replicas (URLs) whose last weight push failed

    @property
    def members(self) -> list[Replica]:
        """The replicas a control call goes to: every one that was admitted and is not leaving."""
        return [r for r in self.pool.replicas if r.state != "draining" and r.served_model is not None]

    async def call(self, method: str, path: str, *, params: Any = None, body: Any = None,
                   each: Callable[[Replica, int], Any] | None = None, retry: bool = False,
                   replicas: Sequence[Replica] | None = None) -> list[Answer]:
        """`method path` on every member (or `replicas`) at once: `body` as JSON, or `each(replica, k)`'s."""
        targets = list(self.members if replicas is None else replicas)
        if not targets:
            raise APIError("No vLLM replica has joined the gateway yet.", status=503, type="server_error",
                           code="upstream_unavailable", retry_after=1)
        return await asyncio.gather(*(
            self._send(r, method, path, params, body if each is None else each(r, k), retry)
            for k, r in enumerate(targets)))

    async def _send(self, replica: Replica, method: str, path: str, params: Any, body: Any, retry: bool) -> Answer:
        content = None if body is None else orjson.dumps(body)
        headers = {"content-type": "application/json"} if content is not None else None
        for attempt in range(self.retries + 1 if retry else 1):
            if attempt:
                await asyncio.sleep(0.2 * 2 ** (attempt - 1))
            try:
                response = await replica.client.request(method, replica.url + path, params=params, content=content,
                                                        headers=headers, timeout=self.timeout)
            except httpx.TimeoutException:  # not retried: the replica may still be doing it (a `wait` pause)
                answer = Answer(replica, None, error=f"timed out after {self.timeout:g} s")
                break
            except httpx.HTTPError as exc:
                answer = Answer(replica, None, error=f"unreachable: {exc!r}")
                continue
            answer = Answer(replica, response.status_code, _body(response))
            if response.status_code == 200:
                return answer
            answer.error = f"answered {response.status_code}: {_reason(answer.body)}"
            if response.status_code not in RETRY_STATUS:
                break
        return answer

    @staticmethod
    def ensure(action: str, answers: Sequence[Answer]) -> None:
        """Raise FleetError unless every replica answered 200."""
        if failed := [a for a in answers if not a.ok]:
            raise FleetError(action, failed, len(answers))

    # --- pause, resume, sleep -------------------------------------------------------------

    async def pause(self, params: dict[str, str]) -> dict[str, Any]:
        """vLLM's `/pause` on every replica; new generations wait at the barrier from now until
        `resume`. `abort`/`wait` with `clear_cache` (vLLM's default) empty the replicas' caches."""
        self.pool.barrier.close("paused", aborting=params.get("mode", "abort") == "abort")
        answers = await self.call("POST", "/pause", params=params, retry=True)
        if params.get("mode", "abort") != "keep" and params.get("clear_cache", "true").lower() != "false":
            self._cleared([a for a in answers if a.ok])
        self.ensure("pause", answers)
        return {"status": "paused"}

    async def resume(self) -> dict[str, Any]:
        """vLLM's `/resume` on every replica; the barrier opens once all answered. One that did not
        resume is fenced (its state is unknown) until a later resume reaches it."""
        answers = await self.call("POST", "/resume", retry=True)
        for answer in answers:
            if answer.ok and answer.replica.fenced == "did not resume":
                answer.replica.fenced = None
            elif not answer.ok and answer.replica.fenced is None:
                answer.replica.fenced = "did not resume"
        self.pool.barrier.open()
        self.ensure("resume", answers)
        return {"status": "resumed"}

    async def sleep(self, params: dict[str, str]) -> dict[str, Any]:
        """vLLM's `/sleep?level=`: the barrier closes; level 1 and 2 drop the replicas' KV caches."""
        self.pool.barrier.close("sleeping", aborting=params.get("mode", "abort") == "abort")
        answers = await self.call("POST", "/sleep", params=params)
        if params.get("level", "1") != "0":
            self._cleared([a for a in answers if a.ok])
        self.ensure("sleep", answers)
        return answers[0].body

    async def wake_up(self, params: Sequence[tuple[str, str]]) -> dict[str, Any]:
        """vLLM's `/wake_up?tags=`: the barrier opens when every replica is fully awake."""
        answers = await self.call("POST", "/wake_up", params=params)
        self.ensure("wake_up", answers)
        awake = all(a.body.get("status") == "awake" for a in answers)
        if awake and self.pool.barrier.reason == "sleeping":
            self.pool.barrier.open()
        return {**answers[0].body, "status": "awake" if awake else "sleeping"}

    async def every(self, path: str, field: str, params: Any = None) -> dict[str, Any]:
        """A yes/no read (`/is_paused`, `/is_sleeping`): true only when it is true of every replica."""
        answers = await self.call("GET", path, params=params, retry=True)
        self.ensure(path.lstrip("/"), answers)
        return {field: all(bool(a.body.get(field)) for a in answers)}

    async def same(self, path: str, params: Any = None) -> Any:
        """A read every replica answers alike (`/server_info`: one model, one config): the first's answer."""
        answers = await self.call("GET", path, params=params, retry=True)
        self.ensure(path.lstrip("/"), answers)
        return answers[0].body

    # --- caches ----------------------------------------------------------------------------

    async def reset_prefix_cache(self, params: Any) -> dict[str, Any]:
        """vLLM's `/reset_prefix_cache`: `success` only if every replica's reset succeeded; the
        router forgets what the reset ones held."""
        answers = await self.call("POST", "/reset_prefix_cache", params=params, retry=True)
        self.ensure("reset_prefix_cache", answers)
        self._cleared([a for a in answers if a.body.get("success")])
        return {"success": all(bool(a.body.get("success")) for a in answers)}

    async def plain(self, path: str, params: Any = None, *, retry: bool = True) -> None:
        """A call answered with an empty 200 (`/reset_mm_cache`, `/reset_encoder_cache`)."""
        self.ensure(path.lstrip("/"), await self.call("POST", path, params=params, retry=retry))

    def _cleared(self, answers: Sequence[Answer]) -> None:
        for answer in answers:
            self.pool.router.cleared(answer.replica.url)

    # --- requests --------------------------------------------------------------------------

    async def abort_requests(self, path: str, request_ids: Sequence[str]) -> dict[str, Any]:
        """`/abort_requests` (or generate's `/inference/v1/abort_requests`): each id to the replica
        whose stream carries it, an id the gateway does not know to every replica, none: all of
        everything. Ids may be the gateway's (`gw-…`) or the engine's (`generate-tokens-gw-…`).
        A generation aborted so is `cancelled`: not resumed as a partial rollout."""
        self._cancel(request_ids)
        if not request_ids:
            answers = await self.call("POST", path, body={"request_ids": []})
            self.ensure("abort_requests", answers)
            return {"status": "aborted", "aborted": sum(_count(a.body) for a in answers)}
        by_replica: dict[Replica, list[str]] = {}
        members = self.members
        for request_id in request_ids:
            holders = [r for r in members if any(s.request_id == _gateway_id(request_id) for s in r.streams)]
            for replica in holders or members:
                by_replica.setdefault(replica, []).append(_engine_id(replica, request_id))
        answers = await asyncio.gather(*(self._send(r, "POST", path, None, {"request_ids": ids}, False)
                                         for r, ids in by_replica.items()))
        self.ensure("abort_requests", answers)
        return {"status": "aborted", "aborted": len(request_ids)}

    def _cancel(self, request_ids: Sequence[str]) -> None:
        wanted = {_gateway_id(request_id) for request_id in request_ids}
        for replica in self.members:
            for stream in replica.streams:
                if not wanted or stream.request_id in wanted:
                    stream.cancelled = True

    # --- weights ---------------------------------------------------------------------------

    async def world_sizes(self, params: Any = None) -> list[int]:
        """Each member's `/get_world_size` (its inference ranks), in member order."""
        answers = await self.call("GET", "/get_world_size", params=params, retry=True)
        self.ensure("get_world_size", answers)
        return [int(a.body["world_size"]) for a in answers]

    async def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> dict[str, Any]:
        """vLLM's `/init_weight_transfer_engine {init_info}` on every replica at once. With a
        `rank_offset` (NCCL), replica k gets the offset plus the world sizes of the replicas before
        it, so the fleet joins the trainer as one group; the trainer's `world_size` must be the
        offset plus the fleet's ranks."""
        members = self.members
        each = None
        if isinstance(offset := init_info.get("rank_offset"), int):
            sizes = await self.world_sizes()
            world = init_info.get("world_size")
            if isinstance(world, int) and world != offset + sum(sizes):
                raise invalid_request(
                    f"init_info.world_size is {world}, but rank_offset {offset} plus the fleet's {sum(sizes)} "
                    f"inference ranks ({', '.join(f'{r.url}: {n}' for r, n in zip(members, sizes))}) is "
                    f"{offset + sum(sizes)}.", param="init_info.world_size", code="world_size_mismatch")
            starts = [offset + sum(sizes[:k]) for k in range(len(sizes))]

            def each(replica: Replica, k: int) -> dict[str, Any]:
                return {"init_info": {**init_info, "rank_offset": starts[k]}}
        answers = await self.call("POST", "/init_weight_transfer_engine", body={"init_info": init_info},
                                  each=each, replicas=members)
        self.ensure("init_weight_transfer_engine", answers)
        return answers[0].body

    async def push(self, path: str, body: Any) -> dict[str, Any]:
        """A step of a weight update (`/start_weight_update`, `/update_weights`, …): sent to every
        replica at once, never retried (`weights_touched` keeps the books)."""
        answers = await self.call("POST", path, body=body)
        if path != "/shutdown_weight_transfer_engine":
            self.weights_touched(answers, "start" if path.lstrip("/") in _STARTS_UPDATE else "change")
        self.ensure(path.lstrip("/"), answers)
        return answers[0].body

    def weights_touched(self, answers: Sequence[Answer], kind: str) -> None:
        """The books after a weight call, whichever way it came (an endpoint or a `/collective_rpc`,
        `rpc_kind`): a replica it failed on is fenced until a later update starts on it ("start")
        or reloads its whole checkpoint ("reload") and it is labelled with the fleet's version;
        one whose weights changed ("change", "reload"), or may have, no longer holds the blocks
        the router's index counts on (they were computed with the weights before)."""
        for answer in answers:
            url = answer.replica.url
            if not answer.ok:
                self.dirty.add(url)
            elif kind in ("start", "reload"):
                self.dirty.discard(url)
            if kind != "start":
                self.pool.router.cleared(url)
        self.fence()

    async def label(self, path: str, body: dict[str, Any] | None, version: str | None) -> dict[str, Any]:
        """`/finish_weight_update {weight_version}` or `/update_weight_version {new_version}`: the
        version becomes the fleet's, and each replica that took it is at it."""
        answers = await self.call("POST", path, body=body)
        if path == "/finish_weight_update":
            self.weights_touched(answers, "change")
        if version is not None:
            self.pool.weight_version = version
            for answer in answers:
                if answer.ok:
                    answer.replica.weight_version = version
        self.fence()
        self.ensure(path.lstrip("/"), answers)
        return answers[0].body

    async def weight_info(self) -> dict[str, Any]:
        """vLLM's `/weight_info`: the fleet's version, and each replica's when they disagree."""
        answers = await self.call("GET", "/weight_info", retry=True)
        self.ensure("weight_info", answers)
        versions = {a.replica.url: str(a.body.get("weight_version")) for a in answers}
        for answer in answers:
            answer.replica.weight_version = versions[answer.replica.url]
        self.fence()
        fleet = self.pool.weight_version or max(set(versions.values()), key=list(versions.values()).count)
        body: dict[str, Any] = {"weight_version": fleet}
        if len(set(versions.values())) > 1:
            body["replicas"] = versions
            body["disagree"] = [url for url, version in versions.items() if version != fleet]
        return body

    async def collective_rpc(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """vLLM's `/collective_rpc` on every replica (never retried); `results` are the replicas'
        lists one after another. A method that starts a weight update or changes the weights
        (`rpc_kind`) keeps the books as the weight endpoint it stands for (`weights_touched`)."""
        answers = await self.call("POST", "/collective_rpc", body=body)
        if (kind := rpc_kind(body["method"])) is not None:
            self.weights_touched(answers, kind)
        self.ensure(f"collective_rpc {body.get('method')}", answers)
        if all(a.body is None for a in answers):
            return None
        return {"results": [r for a in answers if isinstance(a.body, dict) for r in a.body.get("results") or ()]}

    def fence(self) -> None:
        """Out of routing: each replica whose weights failed to load (`dirty`) or that is not at
        the fleet's version; back in when it is at it again."""
        fleet = self.pool.weight_version
        for replica in self.pool.replicas:
            if replica.url in self.dirty:
                reason: str | None = "its last weight update failed"
            elif fleet is not None and replica.weight_version != fleet:
                reason = f"it serves weight version {replica.weight_version!r}, not the fleet's {fleet!r}"
            else:
                reason = replica.fenced if replica.fenced == "did not resume" else None
            if reason != replica.fenced:
                log.warning("replica %s %s", replica.url,
                            f"out of routing: {reason}" if reason else "back in routing at the fleet's version")
            replica.fenced = reason

    # --- LoRA adapters ---------------------------------------------------------------------

    async def load_adapter(self, body: dict[str, Any]) -> Any:
        """vLLM's `/v1/load_lora_adapter` on every replica; each that loaded it serves it from now.
        Loaded again in place (`load_inplace`), the blocks cached under its name are stale: the
        router forgets what those replicas held."""
        name = body["lora_name"]
        answers = await self.call("POST", "/v1/load_lora_adapter", body=body)
        for answer in answers:
            if answer.ok:
                if name in answer.replica.adapters:
                    self.pool.router.cleared(answer.replica.url)
                answer.replica.adapters[name] = body.get("lora_path")
        self.ensure("load_lora_adapter", answers)
        return answers[0].body

    async def unload_adapter(self, body: dict[str, Any]) -> Any:
        """vLLM's `/v1/unload_lora_adapter`, once no generation uses the adapter any more: from the
        call on, new generations naming it are refused (404), those in flight finish first (within
        `timeout`)."""
        name = body["lora_name"]
        self.pool.retiring.add(name)
        try:
            deadline = asyncio.get_running_loop().time() + self.timeout
            while self.pool.adapter_users[name] > 0:
                if asyncio.get_running_loop().time() > deadline:
                    raise APIError(f"Generations with LoRA adapter '{name}' were still running after "
                                   f"{self.timeout:g} s; it was not unloaded.", status=504, type="server_error",
                                   code="fleet_timeout")
                await asyncio.sleep(0.05)
            holders = [r for r in self.members if name in r.adapters] or self.members
            answers = await self.call("POST", "/v1/unload_lora_adapter", body=body, replicas=holders)
            for answer in answers:
                if answer.ok:
                    answer.replica.adapters.pop(name, None)
            self.ensure("unload_lora_adapter", answers)
            return answers[0].body
        finally:
            self.pool.retiring.discard(name)


def _gateway_id(request_id: str) -> str:
    for prefix in ("generate-tokens-", "cmpl-"):
        if request_id.startswith(prefix):
            return request_id[len(prefix):]
    return request_id


def _engine_id(replica: Replica, request_id: str) -> str:
    """The id vLLM's engine knows a gateway request (`gw_…`) by; any other id as given."""
    return engine_request_id(replica.api, request_id) if request_id.startswith("gw_") else request_id


def _count(body: Any) -> int:
    return body.get("aborted", 0) if isinstance(body, dict) else 0


def _body(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return response.text[:500]


def _reason(body: Any) -> str:
    """What a failing replica said: vLLM's `{"error": …}`, FastAPI's `{"detail": …}`, or the text."""
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body))
        if isinstance(error, dict):
            error = error.get("message", error)
        return str(error)[:300]
    return str(body)[:300]
