"""vLLM's RL and dev control endpoints at the gateway's URL, each sent to every replica
(gateway/upstream/control.py): the same paths, query parameters and bodies as one vLLM server
with `VLLM_SERVER_DEV_MODE=1`, and answers in its shapes, so a trainer pointed at one vLLM server
works pointed at the gateway.

They are off unless the gateway runs with `--server-dev-mode` (GATEWAY_SERVER_DEV_MODE=1), as vLLM
keeps them behind VLLM_SERVER_DEV_MODE: whoever reaches an open gateway must not pause the fleet
or load weights into it. With API keys configured, only the `--admin-key` may call them; a
tenant's key is refused (403) before any replica is touched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.adapters.validation import parse_json
from gateway.core import tenancy
from gateway.core.errors import APIError, invalid_request
from gateway.server.http import JSONResponse
from gateway.upstream.control import Fleet

__all__ = ["control_routes"]

Handler = Callable[[Request, Fleet], Awaitable[Any]]
PAUSE_MODES = ("abort", "wait", "keep")


def _control(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        if not request.app.state.settings.server_dev_mode:
            raise APIError(f"{request.method} {request.url.path} is one of the fleet's control endpoints; the gateway "
                           f"serves them only with --server-dev-mode (GATEWAY_SERVER_DEV_MODE=1).", status=404,
                           code="control_endpoints_disabled")
        tenant = tenancy.current.get()
        if tenant is not None and not tenant.admin:
            raise APIError(f"{request.method} {request.url.path} controls every replica: only the admin key may "
                           f"call it.", status=403, type="permission_error", code="admin_key_required")
        answer = await handler(request, request.app.state.fleet)
        if answer is None or isinstance(answer, str):  # vLLM answers some with an empty body or plain text
            return Response(answer, status_code=200)
        return JSONResponse(answer)
    return endpoint


async def _json(request: Request) -> Any:
    """The JSON body, None when there is none (vLLM's `/finish_weight_update` may come without)."""
    raw = await request.body()
    return parse_json(raw) if raw.strip() else None


async def _body(request: Request) -> dict[str, Any]:
    """The JSON object body ({} when there is none)."""
    body = await _json(request)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise invalid_request("The body must be a JSON object.", code="invalid_body")
    return body


async def pause(request: Request, fleet: Fleet) -> Any:
    params = dict(request.query_params)
    if params.get("mode", "abort") not in PAUSE_MODES:
        raise invalid_request(f"mode must be one of {', '.join(PAUSE_MODES)}.", param="mode", code="invalid_value")
    return await fleet.pause(params)


async def resume(request: Request, fleet: Fleet) -> Any:
    return await fleet.resume()


async def is_paused(request: Request, fleet: Fleet) -> Any:
    return await fleet.every("/is_paused", "is_paused")


async def sleep(request: Request, fleet: Fleet) -> Any:
    params = dict(request.query_params)
    if params.get("level", "1") not in ("0", "1", "2"):
        raise invalid_request("level must be 0, 1 or 2.", param="level", code="invalid_value")
    return await fleet.sleep(params)


async def wake_up(request: Request, fleet: Fleet) -> Any:
    return await fleet.wake_up(request.query_params.multi_items())


async def is_sleeping(request: Request, fleet: Fleet) -> Any:
    return await fleet.every("/is_sleeping", "is_sleeping")


async def reset_prefix_cache(request: Request, fleet: Fleet) -> Any:
    return await fleet.reset_prefix_cache(dict(request.query_params))


def _plain(path: str) -> Handler:
    async def handler(request: Request, fleet: Fleet) -> Any:
        await fleet.plain(path, dict(request.query_params))
    return handler


async def collective_rpc(request: Request, fleet: Fleet) -> Any:
    body = await _body(request)
    if not isinstance(body.get("method"), str):
        raise invalid_request("Missing 'method' in request body.", param="method", code="missing_required_parameter")
    return await fleet.collective_rpc(body)


async def abort_requests(request: Request, fleet: Fleet) -> Any:
    ids = (await _body(request)).get("request_ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise invalid_request("request_ids must be a list of request ids.", param="request_ids", code="invalid_value")
    return await fleet.abort_requests(request.url.path, ids)


async def get_world_size(request: Request, fleet: Fleet) -> Any:
    return {"world_size": sum(await fleet.world_sizes(dict(request.query_params)))}


async def init_weight_transfer_engine(request: Request, fleet: Fleet) -> Any:
    init_info = (await _body(request)).get("init_info")
    if not isinstance(init_info, dict):
        raise invalid_request("Missing 'init_info' (an object) in request body.", param="init_info",
                              code="missing_required_parameter")
    return await fleet.init_weight_transfer_engine(init_info)


def _push(path: str) -> Handler:
    async def handler(request: Request, fleet: Fleet) -> Any:
        return await fleet.push(path, await _json(request))
    return handler


async def finish_weight_update(request: Request, fleet: Fleet) -> Any:
    body = await _json(request)
    version = body.get("weight_version") if isinstance(body, dict) else None
    return await fleet.label("/finish_weight_update", body, None if version is None else str(version))


async def update_weight_version(request: Request, fleet: Fleet) -> Any:
    version = (await _body(request)).get("new_version")
    if not isinstance(version, str):
        raise invalid_request("Missing 'new_version' (a string) in request body.", param="new_version",
                              code="missing_required_parameter")
    return await fleet.label("/update_weight_version", {"new_version": version}, version)


async def weight_info(request: Request, fleet: Fleet) -> Any:
    return await fleet.weight_info()


async def server_info(request: Request, fleet: Fleet) -> Any:
    return await fleet.same("/server_info", request.query_params.multi_items())


async def load_lora_adapter(request: Request, fleet: Fleet) -> Any:
    body = await _body(request)
    if not isinstance(body.get("lora_name"), str) or not isinstance(body.get("lora_path"), str):
        raise invalid_request("'lora_name' and 'lora_path' (strings) are required.", param="lora_name",
                              code="missing_required_parameter")
    return await fleet.load_adapter(body)


async def unload_lora_adapter(request: Request, fleet: Fleet) -> Any:
    body = await _body(request)
    if not isinstance(body.get("lora_name"), str):
        raise invalid_request("'lora_name' (a string) is required.", param="lora_name",
                              code="missing_required_parameter")
    return await fleet.unload_adapter(body)


def control_routes() -> list[Route]:
    """vLLM's paths (vllm/entrypoints/rl/online/api_router.py, serve/dev/{cache,sleep,rpc,server_info}/
    api_router.py, scale_out/token_in_token_out/api_router.py's abort, serve/lora/api_router.py)."""
    post = {
        "/pause": pause, "/resume": resume, "/sleep": sleep, "/wake_up": wake_up,
        "/reset_prefix_cache": reset_prefix_cache, "/reset_mm_cache": _plain("/reset_mm_cache"),
        "/reset_encoder_cache": _plain("/reset_encoder_cache"), "/collective_rpc": collective_rpc,
        "/abort_requests": abort_requests, "/inference/v1/abort_requests": abort_requests,
        "/init_weight_transfer_engine": init_weight_transfer_engine,
        "/start_weight_update": _push("/start_weight_update"),
        "/start_draft_weight_update": _push("/start_draft_weight_update"),
        "/update_weights": _push("/update_weights"),
        "/shutdown_weight_transfer_engine": _push("/shutdown_weight_transfer_engine"),
        "/finish_weight_update": finish_weight_update, "/update_weight_version": update_weight_version,
        "/v1/load_lora_adapter": load_lora_adapter, "/v1/unload_lora_adapter": unload_lora_adapter,
    }
    get = {"/is_paused": is_paused, "/is_sleeping": is_sleeping, "/get_world_size": get_world_size,
           "/weight_info": weight_info, "/server_info": server_info}
    return [*(Route(path, _control(handler), methods=["POST"]) for path, handler in post.items()),
            *(Route(path, _control(handler), methods=["GET"]) for path, handler in get.items())]
