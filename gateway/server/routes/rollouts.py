"""GET/DELETE /v1/rollouts/{rollout_id}: export or free one of the caller's rollouts; POST
/v1/rollouts/export: many at once, as newline-delimited JSON.

`?format=verl|slime` answers the trajectory as that trainer's samples, one per segment
(gateway/adapters/rollout_export.py). The bulk export streams one line per rollout, or per
sample with a trainer's format, read from the store one rollout at a time, so a trainer
collecting thousands of episodes makes one request and the gateway holds one trajectory in
memory at a time. A rollout that cannot be exported (gone, unknown) is a line with its error;
the others still come.

GET /v1/rollouts answers the store's size and eviction counters (a tenant's own rollouts
and tokens when API keys are configured; the admin key's: the whole store).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from gateway.adapters import rollout_export
from gateway.adapters.request_schema import RolloutExportBody, validate
from gateway.core.errors import APIError
from gateway.pipeline import session
from gateway.pipeline.runtime import Runtime
from gateway.server.http import JSONResponse, read_json

__all__ = ["delete_rollout", "export_rollouts", "get_rollout", "rollout_stats"]


async def get_rollout(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    trainer = rollout_export.check_format(request.query_params.get("format"))
    export = await session.export_rollout(runtime, request.path_params["rollout_id"])
    if trainer == "gateway":
        return JSONResponse(export)
    return JSONResponse({"object": "list", "format": trainer,
                         "data": rollout_export.samples(export, trainer, runtime.format.decode)})


async def export_rollouts(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    body = validate(RolloutExportBody, await read_json(request))
    return StreamingResponse(_lines(runtime, body.ids, body.format or "gateway", bool(body.delete)),
                             media_type="application/x-ndjson")


async def _lines(runtime: Runtime, ids: list[str], trainer: str, delete: bool) -> AsyncIterator[bytes]:
    for rollout_id in ids:
        try:
            export = await session.export_rollout(runtime, rollout_id)
            if delete:
                await session.delete_rollout(runtime, rollout_id)
        except APIError as exc:
            yield _line({"id": rollout_id, "error": {**exc.http_body()["error"], "status": exc.status}})
            continue
        if trainer == "gateway":
            yield _line(export)
            continue
        for sample in rollout_export.samples(export, trainer, runtime.format.decode):
            yield _line(sample)


def _line(value: dict[str, Any]) -> bytes:
    return orjson.dumps(value) + b"\n"


async def delete_rollout(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    rollout_id = request.path_params["rollout_id"]
    await session.delete_rollout(runtime, rollout_id)
    return JSONResponse({"object": "rollout.deleted", "id": rollout_id, "deleted": True})


async def rollout_stats(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    return JSONResponse(await session.rollout_summary(runtime))
