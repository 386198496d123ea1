"""The ASGI application: routes, error handlers and the runtime's lifetime."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute

from gateway.adapters import reasoning_blob
from gateway.adapters.codex_catalog import codex_model_info
from gateway.core.errors import APIError
from gateway.core.image import ImageLimits
from gateway.core.sampling import GenerationDefaults
from gateway.core.settings import Settings
from gateway.formats import load_format
from gateway.pipeline.runtime import Runtime
from gateway.server._admission import Admission
from gateway.server._gate import ServerGate
from gateway.server._metrics import Metrics, metrics_endpoint
from gateway.server._observe import ObserveMiddleware
from gateway.server._openapi import openapi_endpoint
from gateway.server._status import status_json, status_page, status_script
from gateway.server.auth import AuthMiddleware, KeyRing, warn_if_open
from gateway.server.drain import Drain, DrainMiddleware
from gateway.server.http import JSONResponse, api_error_handler, http_error_handler
from gateway.server.routes.chat import create_chat_completion
from gateway.server.routes.compact import compact_response
from gateway.server.routes.control import control_routes
from gateway.server.routes.conversations import (
    create_conversation,
    create_items,
    delete_conversation,
    delete_item,
    get_conversation,
    get_item,
    list_items,
    update_conversation,
)
from gateway.server.routes.messages import count_tokens, create_message
from gateway.server.routes.responses import count_input_tokens, create_response
from gateway.server.routes.rollouts import delete_rollout, export_rollouts, get_rollout, rollout_stats
from gateway.server.routes.stored_responses import cancel_response, delete_response, get_response, list_input_items
from gateway.server.routes.token_in import create_completion, generate
from gateway.server.routes.tokenize import detokenize, tokenize
from gateway.server.routes.websocket import responses_websocket
from gateway.server.tenant_limits import TenantLimits
from gateway.server.tracing import start as start_tracing
from gateway.server.tracing import stop as stop_tracing
from gateway.store.backend import open_conversations, open_store
from gateway.store.observer import StoreObserver
from gateway.store.responses import ResponseStore
from gateway.store.rollouts import RolloutStore
from gateway.store.sessions import SessionStore
from gateway.tokenfix.locality import failing_kinds
from gateway.upstream.control import Fleet
from gateway.upstream.disaggregation import SplitPolicy
from gateway.upstream.health import HealthPolicy
from gateway.upstream.outlier import OutlierPolicy
from gateway.upstream.pool import Pool
from gateway.upstream.router import Router

__all__ = ["build_runtime", "create_app"]

log = logging.getLogger(__name__)


def build_runtime(settings: Settings, observer: StoreObserver | None = None) -> Runtime:
    sessions, responses = SessionStore(), ResponseStore()
    rollouts = RolloutStore(max_tokens=settings.rollout_max_tokens, ttl=settings.rollout_ttl)
    chat_format = load_format(settings.model, tokenizer=settings.tokenizer, chat_format=settings.chat_format,
                              reasoning_parser=settings.reasoning_parser, tool_parser=settings.tool_parser,
                              locality=failing_kinds)
    return Runtime(
        model_name=settings.model_name,
        format=chat_format,
        defaults=GenerationDefaults.load(settings.model),
        pool=Pool(settings.upstreams, api=settings.upstream_api, resolve_interval=settings.resolve_interval,
                  idle_timeout=settings.upstream_idle_timeout, header_timeout=settings.upstream_header_timeout,
                  policy=HealthPolicy(interval=settings.health_interval, backoff_max=settings.health_backoff_max),
                  outliers=OutlierPolicy(
                      consecutive_failures=settings.outlier_consecutive_failures,
                      failure_percentage=settings.outlier_failure_percentage,
                      failure_request_volume=settings.outlier_failure_request_volume,
                      interval=settings.outlier_interval, base_ejection_time=settings.outlier_base_ejection_time,
                      max_ejection_time=settings.outlier_max_ejection_time,
                      max_ejection_percent=settings.outlier_max_ejection_percent),
                  load_factor=settings.routing_load_factor, barrier_timeout=settings.update_barrier_timeout,
                  split=SplitPolicy(settings.pd_min_new_tokens, settings.pd_prefill_timeout),
                  router=Router(settings.routing, block_tokens=settings.prefix_block_tokens,
                                load_factor=settings.routing_load_factor, kv_events=settings.kv_events,
                                metrics_interval=settings.replica_metrics_interval)),
        tokens_as_ids=settings.return_tokens_as_token_ids, salt_by_version=settings.cache_salt_by_weight_version,
        partial_rollouts=settings.partial_rollouts,
        tool_grammars=settings.tool_grammars,
        store=open_store(settings.state_url, sessions, responses, rollouts, observer=observer,
                         key_prefix=settings.state_key_prefix),
        conversations=open_conversations(settings.state_url, key_prefix=settings.state_key_prefix,
                                         observer=observer),
        image_limits=ImageLimits(max_bytes=settings.max_image_bytes, max_images=settings.max_images,
                                 max_pixels=settings.max_image_pixels, allow_urls=settings.allow_image_urls),
    )


async def list_models(request: Request) -> Response:
    """OpenAI's model list; with `client_version` (Codex's models endpoint) also Codex's catalog."""
    runtime: Runtime = request.app.state.runtime
    model = {"id": runtime.model_name, "object": "model", "created": 0, "owned_by": "vllm-gateway",
             "max_model_len": runtime.pool.max_model_len}
    adapters = [{"id": name, "object": "model", "created": 0, "owned_by": "vllm-gateway", "root": root,
                 "parent": runtime.model_name, "max_model_len": runtime.pool.max_model_len}
                for name, root in sorted(runtime.pool.adapters.items())]  # as vLLM lists its LoRA adapters
    body: dict = {"object": "list", "data": [model, *adapters]}
    if "client_version" in request.query_params:
        body["models"] = [codex_model_info(runtime.model_name, runtime.pool.max_model_len,
                                           images=runtime.format.image_token_id is not None)]
    return JSONResponse(body)


async def health(request: Request) -> Response:
    """Replicas and their state; 200 while at least one is routable."""
    pool = request.app.state.runtime.pool
    healthy = len(pool.healthy)
    body = {"status": "ok" if healthy else "unavailable", "healthy_replicas": healthy,
            "draining": request.app.state.drain.draining,
            "replicas": [{"url": r.url, "state": r.state, "healthy": r.healthy, "api": r.api,
                          "inflight": r.inflight, "requests": r.requests, "weight_version": r.weight_version,
                          "fenced": r.fenced} for r in pool.replicas]}
    return JSONResponse(body, status_code=200 if healthy else 503)


async def live(request: Request) -> Response:
    """Liveness: the gateway process answers, whatever its replicas' state (a liveness probe on
    /health would restart a healthy gateway while vLLM loads its model)."""
    return JSONResponse({"status": "alive"})


async def ready(request: Request) -> Response:
    """Readiness for a load balancer: a routable replica, and not shutting down."""
    is_ready = request.app.state.runtime.pool.ready and not request.app.state.drain.draining
    return JSONResponse({"ready": is_ready}, status_code=200 if is_ready else 503)


def create_app(settings: Settings, runtime: Runtime | None = None) -> Starlette:
    handlers = {APIError: api_error_handler, HTTPException: http_error_handler}
    drain = Drain(settings.drain_timeout)
    admission = Admission(settings.max_concurrent_requests, settings.max_queued_requests)
    keys, tenant_limits = KeyRing.load(settings), TenantLimits.load(settings)
    warn_if_open(keys, settings.host)
    if settings.server_dev_mode and not keys.enabled:
        log.warning("--server-dev-mode without API keys: anyone who reaches the gateway may pause every replica and "
                    "load weights into it (set --admin-key)")
    app = Starlette(routes=_routes(), exception_handlers=handlers, lifespan=_lifespan(settings, runtime),
                    middleware=[Middleware(AuthMiddleware, keys=keys),  # refused before anything else is taken
                                Middleware(DrainMiddleware, drain=drain)])
    app.state.settings = settings
    app.state.drain = drain
    app.state.admission = admission  # the exchange's gate takes every generation's slot from it
    reasoning_blob.use_secret(settings.reasoning_secret)
    app.state.ws_connections = 0  # open WebSocket connections, against settings.max_websocket_connections
    app.state.metrics = tenant_limits.metrics = Metrics(app.state)
    app.state.tenant_limits = tenant_limits
    app.add_middleware(ObserveMiddleware, metrics=app.state.metrics)  # outermost: drain refusals are counted too
    return app


def _lifespan(settings: Settings, runtime: Runtime | None) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    """Start the runtime (pool, fleet, traces) with the app; close it all on shutdown."""
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.runtime = runtime or build_runtime(settings, app.state.metrics.store)
        app.state.tenant_limits.share(app.state.runtime.store)  # counted in Redis with --state-url
        app.state.runtime.gate = ServerGate(app.state.admission, app.state.tenant_limits)  # every generation's
        await app.state.runtime.pool.start()
        app.state.fleet = Fleet(app.state.runtime.pool, timeout=settings.control_timeout)
        log.info("event loop: %s", type(asyncio.get_running_loop()).__module__)  # "uvloop" where installed
        served = [r.served_model for r in app.state.runtime.pool.replicas if r.served_model]
        if settings.served_model_name is None and served:
            app.state.runtime.model_name = served[0]  # clients send what vLLM itself would accept
        traces = start_tracing(settings)  # this process's exporter: after a --workers fork, not before
        try:
            yield
        finally:
            app.state.tenant_limits.close()
            await app.state.runtime.pool.close()
            await app.state.runtime.store.close()
            await app.state.runtime.conversations.close()
            if traces:
                stop_tracing()  # the spans still buffered are exported

    return lifespan


def _routes() -> list[BaseRoute]:
    """Every path the gateway serves (tests/server/test_gate.py enumerates the generating ones)."""
    return [
        Route("/v1/responses", create_response, methods=["POST"]),
        Route("/v1/responses/compact", compact_response, methods=["POST"]),
        Route("/v1/responses/input_tokens", count_input_tokens, methods=["POST"]),
        Route("/v1/responses/{response_id}", get_response, methods=["GET"]),
        Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/input_items", list_input_items, methods=["GET"]),
        Route("/v1/responses/{response_id}/cancel", cancel_response, methods=["POST"]),
        WebSocketRoute("/v1/responses", responses_websocket),
        Route("/v1/conversations", create_conversation, methods=["POST"]),
        Route("/v1/conversations/{conversation_id}", get_conversation, methods=["GET"]),
        Route("/v1/conversations/{conversation_id}", update_conversation, methods=["POST"]),
        Route("/v1/conversations/{conversation_id}", delete_conversation, methods=["DELETE"]),
        Route("/v1/conversations/{conversation_id}/items", list_items, methods=["GET"]),
        Route("/v1/conversations/{conversation_id}/items", create_items, methods=["POST"]),
        Route("/v1/conversations/{conversation_id}/items/{item_id}", get_item, methods=["GET"]),
        Route("/v1/conversations/{conversation_id}/items/{item_id}", delete_item, methods=["DELETE"]),
        Route("/v1/chat/completions", create_chat_completion, methods=["POST"]),
        Route("/v1/messages", create_message, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/rollouts", rollout_stats, methods=["GET"]),
        Route("/v1/rollouts/export", export_rollouts, methods=["POST"]),
        Route("/v1/rollouts/{rollout_id}", get_rollout, methods=["GET"]),
        Route("/v1/rollouts/{rollout_id}", delete_rollout, methods=["DELETE"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/v1/completions", create_completion, methods=["POST"]),
        Route("/inference/v1/generate", generate, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/openapi.json", openapi_endpoint, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/live", live, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        *control_routes(),
        Route("/status", status_page, methods=["GET"]),
        Route("/status.js", status_script, methods=["GET"]),
        Route("/status.json", status_json, methods=["GET"]),
    ]
