"""A scripted vLLM replica with vLLM 0.32's RL and dev control endpoints, for the protocol cases
real vLLM-CPU cannot show (FIXTURES.md: no weight-transfer backend moves data on the CPU).

Paths, bodies and answers are vLLM's (vllm/entrypoints/rl/online/api_router.py lines 31-286,
serve/dev/cache/api_router.py 20-64, serve/dev/rpc/api_router.py 23-59). Like NCCL's receivers,
`/init_weight_transfer_engine` and `/update_weights` block inside the collective until every
rank joined: here, until every replica of the `Collective` arrived (a gateway that sent them
one after another would never get the first answer; the collective answers 500 after its
timeout, so such a test fails instead of hanging). `fail` scripts an answer status per path,
`hold` a path that does not answer until the test sets the event.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.fake_vllm import FakeVLLM

__all__ = ["Collective", "ControlReplica"]


class Collective:
    """The ranks of one NCCL group: each blocks in `join` until all `parties` did."""

    def __init__(self, parties: int, timeout: float = 30.0) -> None:
        self._barrier = threading.Barrier(parties, timeout=timeout)

    async def join(self) -> bool:
        try:
            await asyncio.to_thread(self._barrier.wait)
            return True
        except threading.BrokenBarrierError:
            return False


@dataclass
class ControlReplica(FakeVLLM):
    world_size: int = 1  # /get_world_size (TP × PP × DP)
    paused: bool = False
    collective: Collective | None = None  # shared by the replicas of one test
    fail: dict[str, int] = field(default_factory=dict)  # path → status to answer instead
    hold: dict[str, threading.Event] = field(default_factory=dict)  # path → answered once set
    calls: list[tuple[str, str, Any]] = field(default_factory=list)  # (path, query string, JSON body)
    loras: dict[str, str] = field(default_factory=dict)  # LoRA adapters loaded: name → path

    def app(self):  # type: ignore[override]
        app = super().app()
        for path, handler, method in (
                ("/pause", self._pause, "POST"), ("/resume", self._resume, "POST"),
                ("/is_paused", self._is_paused, "GET"), ("/get_world_size", self._world_size, "GET"),
                ("/init_weight_transfer_engine", self._collective("Weight transfer initialized"), "POST"),
                ("/start_weight_update", self._message("Weight update started"), "POST"),
                ("/update_weights", self._collective("Weights updated"), "POST"),
                ("/finish_weight_update", self._finish, "POST"),
                ("/update_weight_version", self._update_version, "POST"),
                ("/weight_info", self._weight_info, "GET"),
                ("/reset_prefix_cache", self._reset, "POST"), ("/collective_rpc", self._rpc, "POST"),
                ("/server_info", self._server_info, "GET"),
                ("/v1/load_lora_adapter", self._load_lora, "POST"), ("/v1/unload_lora_adapter", self._unload_lora, "POST"),
                ("/abort_requests", self._abort_all, "POST")):
            app.router.routes.append(Route(path, self._scripted(handler), methods=[method]))
        return app

    def paths(self) -> list[str]:
        return [path for path, _, _ in self.calls]

    def _scripted(self, handler):
        async def endpoint(request: Request) -> Response:
            raw = await request.body()
            body = await request.json() if raw.strip() else None
            path = request.url.path
            self.calls.append((path, request.url.query, body))
            if (event := self.hold.get(path)) is not None:
                await asyncio.to_thread(event.wait, 60)
            if (status := self.fail.get(path)) is not None:
                return JSONResponse({"error": f"scripted {path} failure"}, status_code=status)
            return await handler(request, body)
        return endpoint

    async def _pause(self, request: Request, body: Any) -> Response:
        self.paused = True
        return JSONResponse({"status": "paused"})

    async def _resume(self, request: Request, body: Any) -> Response:
        self.paused = False
        return JSONResponse({"status": "resumed"})

    async def _is_paused(self, request: Request, body: Any) -> Response:
        return JSONResponse({"is_paused": self.paused})

    async def _world_size(self, request: Request, body: Any) -> Response:
        return JSONResponse({"world_size": self.world_size})

    def _collective(self, message: str):
        async def handler(request: Request, body: Any) -> Response:
            if self.collective is not None and not await self.collective.join():
                return JSONResponse({"error": "the collective timed out: not every rank joined"}, status_code=500)
            return JSONResponse({"message": message})
        return handler

    def _message(self, message: str):
        async def handler(request: Request, body: Any) -> Response:
            return JSONResponse({"message": message})
        return handler

    async def _finish(self, request: Request, body: Any) -> Response:
        if body and body.get("weight_version") is not None:
            self.weight_version = body["weight_version"]
        return JSONResponse({"message": "Weight update finished"})

    async def _update_version(self, request: Request, body: Any) -> Response:
        self.weight_version = body["new_version"]
        return JSONResponse({"success": True, "new_version": self.weight_version})

    async def _weight_info(self, request: Request, body: Any) -> Response:
        return JSONResponse({"weight_version": self.weight_version})

    async def _reset(self, request: Request, body: Any) -> Response:
        return JSONResponse({"success": True})

    async def _abort_all(self, request: Request, body: Any) -> Response:
        """vLLM's RL /abort_requests: the ids given, or (empty) everything it is running."""
        ids = body.get("request_ids") or []
        self.aborted.extend(ids)
        return JSONResponse({"status": "aborted", "aborted": len(ids) or 1})

    async def _server_info(self, request: Request, body: Any) -> Response:
        """vLLM's dev /server_info?config_format=json, cut to what trainers read (TRL: the dtype)."""
        return JSONResponse({"vllm_config": {"model_config": {"dtype": "torch.bfloat16", "model": self.model}}})

    async def _load_lora(self, request: Request, body: Any) -> Response:
        """vLLM's answers (vllm/entrypoints/openai/models/serving.py): plain text on success, 400 when
        the name is taken and `load_inplace` is not set."""
        name = body["lora_name"]
        if name in self.loras and not body.get("load_inplace"):
            return JSONResponse({"error": {"message": f"The lora adapter '{name}' has already been loaded.",
                                           "type": "InvalidUserInput", "param": None, "code": 400}},
                                status_code=400)
        self.loras[name] = body["lora_path"]
        return Response(f"Success: LoRA adapter '{name}' added successfully.")

    async def _unload_lora(self, request: Request, body: Any) -> Response:
        name = body["lora_name"]
        if self.loras.pop(name, None) is None:
            return JSONResponse({"error": {"message": f"The lora adapter '{name}' cannot be found.",
                                           "type": "NotFoundError", "param": None, "code": 404}}, status_code=404)
        return Response(f"Success: LoRA adapter '{name}' removed successfully.")

    def _model_error(self, body: dict[str, Any]) -> Response | None:
        return None if body.get("model") in self.loras else super()._model_error(body)

    async def _rpc(self, request: Request, body: Any) -> Response:
        """vLLM's /collective_rpc; SkyRL's worker method that receives NCCL weights
        (`update_weights_nccl`) blocks in the collective like /update_weights."""
        if body.get("method") == "update_weights_nccl" and self.collective is not None \
                and not await self.collective.join():
            return JSONResponse({"error": "the collective timed out: not every rank joined"}, status_code=500)
        return JSONResponse({"results": [None] * self.world_size})
