"""The status page: what an operator looks at without a Prometheus (GET /status).

HAProxy's stats page and Envoy's admin page are the model: one page, served by the process
itself, nothing fetched from elsewhere. /status and /status.js (gateway/server/static/) are
the page and its script, which hold no data and are open; the script polls /status.json,
which holds everything and needs the `--admin-key` when API keys are configured (the page
asks for it, or reads it from its address's `#key=…`, and sends it as a Bearer token).

/status.json is read from what the process already keeps — the pool's replicas and their
outlier records, the router's view of each replica's cache and /metrics (queue, KV-cache
use, prefix-cache hits), `Recent`'s last minutes (gateway/server/_recent.py), the stores —
so serving it costs one pass over the replicas and, with a shared store, one INFO round
trip. Every figure is this process's: with `--workers N`, each worker answers for itself.
"""

from __future__ import annotations

import os
import time
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.core import tenancy
from gateway.core.errors import APIError
from gateway.pipeline.runtime import Runtime
from gateway.server.http import JSONResponse
from gateway.upstream.replica import Replica
from gateway.upstream.router import ReplicaView, Router

__all__ = ["PAGE_PATHS", "status_json", "status_page", "status_script"]

# The page's shell: open, as it holds no data (the auth middleware lets these through).
PAGE_PATHS = frozenset({"/status", "/status.js"})

_STATIC = resources.files("gateway.server") / "static"
_STARTED = time.time()


async def status_page(request: Request) -> Response:
    return Response((_STATIC / "status.html").read_bytes(), media_type="text/html; charset=utf-8",
                    headers={"cache-control": "no-store"})


async def status_script(request: Request) -> Response:
    return Response((_STATIC / "status.js").read_bytes(), media_type="text/javascript; charset=utf-8",
                    headers={"cache-control": "no-store"})


async def status_json(request: Request) -> Response:
    """Everything the page shows; the admin key's only, when API keys are configured."""
    tenant = tenancy.current.get()  # None without API keys: the page is open then, as /metrics is
    if tenant is not None and not tenant.admin:
        raise APIError("The status page's data needs the admin key (--admin-key); this key is a tenant's.",
                           status=403, type="permission_error", code="admin_key_required")
    state = request.app.state
    runtime: Runtime = state.runtime
    pool = runtime.pool
    body = {
        "object": "gateway.status",
        "gateway": {"model": runtime.model_name, "pid": os.getpid(), "started_at": round(_STARTED, 3),
                    "uptime_s": round(time.time() - _STARTED, 1), "routing": pool.router.mode,
                    "draining": state.drain.draining, "websockets": state.ws_connections},
        "replicas": [replica_status(r, pool.router.views.get(r.url)) for r in pool.replicas],
        "routing": routing_status(pool.router, pool.outliers.panic_routes, pool.outliers.overflow),
        "traffic": state.metrics.recent.series(),
        "errors": {"by_kind": dict(state.metrics.recent.errors.most_common()),
                   "cancelled": state.metrics.recent.cancelled},
        "held": held(runtime),
        "store": await store_status(runtime, state.metrics.store.fallback_counts),
    }
    return JSONResponse(body, headers={"cache-control": "no-store"})


def replica_status(replica: Replica, view: ReplicaView | None) -> dict[str, Any]:
    """One replica's row: its state and why, its load as vLLM reports it, its ejections and
    what the router knows its cache holds."""
    outlier = replica.outlier
    row: dict[str, Any] = {
        "url": replica.url, "state": replica.state, "reason": _reason(replica), "api": replica.api,
        "model": replica.served_model, "inflight": replica.inflight, "requests": replica.requests,
        "ejections": dict(outlier.ejections), "ejected_at": outlier.last_ejected_at or None,
        "ejection_s": outlier.last_ejection_time,
        # The fleet's control plane (gateway/upstream/control.py): the weights it serves, its LoRA adapters.
        "weight_version": replica.weight_version, "adapters": sorted(replica.adapters),
    }
    if view is not None:
        load = view.load
        row |= {"metrics": load.known, "running": load.running, "waiting": load.waiting,
                "kv_usage": round(load.kv_usage, 4), "kv_capacity_tokens": load.capacity_tokens,
                "prefix_hit_rate": round(load.prefix_hits / load.prefix_queries, 4) if load.prefix_queries else None,
                "prefix_index": {"sent": len(view.sent), "events": len(view.blocks) if view.blocks is not None else None,
                                 "events_live": view.live}}
    return row


def _reason(replica: Replica) -> str:
    """Why a replica is not routable, in words (empty when it is)."""
    if replica.state == "ejected":
        outlier = replica.outlier
        held = outlier.held_until - time.monotonic()
        if not outlier.last_reason:
            return "ejected"
        return f"{outlier.last_reason} ({outlier.last_kind}" + (f", held out {held:.0f} s more)" if held > 0 else ")")
    if replica.state == "starting":
        return "probing /health and /v1/models, then a warmup generation"
    if replica.state == "draining":
        return "gone from the upstream set; leaves once idle"
    return f"out of routing: {replica.fenced}" if replica.fenced is not None else ""


def routing_status(router: Router, panic_routes: int, overflow: int) -> dict[str, Any]:
    stats = router.stats
    return {"mode": router.mode, "decisions": dict(sorted(stats.decisions.items())),
            "prefix_kept": round(stats.matched_tokens / stats.best_tokens, 4) if stats.best_tokens else None,
            "below_best": stats.below_best, "panic_routes": panic_routes, "ejections_overflow": overflow}


def held(runtime: Runtime) -> dict[str, Any]:
    """Sessions, rollouts and conversations this process holds (with a shared store, its cache of them)."""
    rollouts = runtime.store.rollouts.summary()
    conversations = runtime.conversations
    return {"sessions": len(runtime.store.sessions), "rollouts": rollouts["rollouts"],
            "rollout_tokens": rollouts["tokens"],
            "conversations": len(conversations) if hasattr(conversations, "__len__") else None}


async def store_status(runtime: Runtime, fallbacks: dict[str, int]) -> dict[str, Any]:
    """The state store's kind and health: a shared one answers INFO, or is unreachable."""
    store = runtime.store
    body: dict[str, Any] = {"kind": store.kind, "fallbacks": dict(fallbacks)}
    if store.kind == "memory":
        return body | {"status": "ok", "detail": "in this process"}
    figures = await store.figures()
    if figures is None:
        return body | {"status": "unreachable", "detail": "the shared store did not answer INFO"}
    return body | {"status": "ok", "memory_bytes": figures["memory_bytes"], "maxmemory_bytes": figures["maxmemory_bytes"],
                   "keys": figures["keys"], "evicted_keys": figures["evicted_keys"], "nodes": len(figures["nodes"])}
