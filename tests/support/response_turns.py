"""A Responses turn built as the route builds it, over a fresh runtime and a scripted replica."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from gateway.adapters.responses.turn import ResponseTurn, from_http
from gateway.core.settings import Settings
from gateway.server.app import build_runtime
from tests.support.fake_vllm import FakeVLLM, Script


def scenario(model_dir: str, scripts: list[Script], drive: Callable[[Any, ResponseTurn], Awaitable[Any]],
             **body: Any) -> tuple[Any, FakeVLLM]:
    """`drive(runtime, made)` on a built (not started) turn of `{"input": "hi", **body}`; (its
    result, the fake replica that got `scripts`)."""
    with FakeVLLM() as fake:
        fake.queue(*scripts)

        async def run() -> Any:
            settings = Settings(model=model_dir, upstreams=[fake.url], served_model_name="tiny-qwen3")
            runtime = build_runtime(settings)
            await runtime.pool.start()
            try:
                raw = orjson.dumps({"model": "tiny-qwen3", "input": "hi", **body})
                return await drive(runtime, await from_http(runtime, raw, settings))
            finally:
                await runtime.pool.close()
        return asyncio.run(run()), fake
