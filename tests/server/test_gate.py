"""Every route that can reach a replica passes the exchange's gate: with the server's budget
(`--max-concurrent-requests`) or the tenant's (`--tenant-max-concurrent-requests`) held by a
streaming response, each answers 429 with Retry-After and sends nothing upstream.

The routes come from the app itself, not a list: every HTTP route and the WebSocket route is
tried, with the budget free, with the request body of each API the gateway serves; those that
reached a replica are the generating ones, and each is tried again with the budget full.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from starlette.routing import Route, WebSocketRoute
from websockets.sync.client import connect

from gateway.core.settings import Settings
from gateway.server.app import create_app
from tests.support.fake_vllm import Script
from tests.support.holder import Holder
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.stack import Stack, fake_stack
from tests.support.waiting import wait_for

MODEL = "tiny-qwen3"
KEY = "sk-alice"
UPSTREAM = ("/inference/v1/generate", "/v1/completions")
PROMPT = [9707, 1879]  # "Hello world"
# One body per API shape the gateway speaks; each route is tried with every one.
SHAPES: dict[str, dict[str, Any]] = {
    "responses": {"model": MODEL, "input": "hi"},
    "responses-stream": {"model": MODEL, "input": "hi", "stream": True},
    "responses-background": {"model": MODEL, "input": "hi", "background": True},
    "chat": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    "chat-stream": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True},
    "messages": {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
    "completions": {"model": MODEL, "prompt": PROMPT, "max_tokens": 4},
    "generate": {"model": MODEL, "token_ids": PROMPT, "sampling_params": {"max_tokens": 4}},
}
# Not a list of what to test: the least the enumeration must find, so that it cannot pass empty.
AT_LEAST = {("POST", "/v1/responses"), ("POST", "/v1/responses/compact"), ("POST", "/v1/chat/completions"),
            ("POST", "/v1/messages"), ("POST", "/v1/completions"), ("POST", "/inference/v1/generate"),
            ("WEBSOCKET", "/v1/responses")}


@dataclass(frozen=True)
class Probe:
    method: str  # an HTTP method, or WEBSOCKET
    path: str
    shape: str | None


@pytest.fixture(params=["server", "tenant"])
def budget(request, qwen_tokenizer_dir, tmp_path) -> Iterator[tuple[Stack, dict[str, str]]]:
    """One request in flight fills it: the server's, or the API key's tenant's."""
    if request.param == "server":
        options: dict[str, Any] = {"max_concurrent_requests": 1}
        headers = {}
    else:
        (tmp_path / "keys").write_text(f"{KEY} alice\n")
        options = {"api_key_file": str(tmp_path / "keys"), "tenant_max_concurrent_requests": 1}
        headers = {"Authorization": f"Bearer {KEY}", "x-api-key": KEY}
    with fake_stack(qwen_tokenizer_dir, served_model_name=MODEL, **options) as stack:
        yield stack, headers


def probes() -> list[Probe]:
    app = create_app(Settings(model="unused", upstreams=["http://127.0.0.1:9"]))
    found = []
    for route in app.routes:
        path = route.path.replace("{", "").replace("}", "")  # a path parameter named as itself
        shapes = list(SHAPES) if isinstance(route, WebSocketRoute) or "POST" in (route.methods or ()) else [None]
        methods = ["WEBSOCKET"] if isinstance(route, WebSocketRoute) else sorted(route.methods - {"HEAD"}) \
            if isinstance(route, Route) else []
        found += [Probe(method, path, shape) for method in methods for shape in shapes
                  if shape is None or method in ("POST", "WEBSOCKET")]
    return found


def send(stack: Stack, probe: Probe, headers: dict[str, str]) -> tuple[int, str | None]:
    """The status answered (a WebSocket's first event: its `status`, or 200), and Retry-After."""
    body = dict(SHAPES[probe.shape]) if probe.shape else None
    if probe.method == "WEBSOCKET":
        with connect(stack.url.replace("http://", "ws://") + probe.path, additional_headers=headers) as ws:
            ws.send(orjson.dumps({"type": "response.create", **(body or {})}).decode())
            event = orjson.loads(ws.recv(timeout=60))
            while event["type"] not in ("error", "response.completed", "response.failed", "response.incomplete"):
                event = orjson.loads(ws.recv(timeout=60))
            return (event.get("status", 400) if event["type"] == "error" else 200), None
    response = httpx.request(probe.method, stack.url + probe.path, json=body, headers=headers, timeout=60)
    return response.status_code, response.headers.get("retry-after")


def upstream(stack: Stack) -> int:
    return sum(1 for r in stack.fake.requests if r.path in UPSTREAM)


def idle(stack: Stack) -> None:
    wait_for(lambda: stack.runtime.gate.admission.active == 0, "every place at the gate given back")


def test_every_route_that_reaches_a_replica_gets_a_429_when_the_budget_is_full(budget, tokenizer):
    stack, headers = budget
    done = ids(tokenizer, "ok") + [IM_END]
    generating = []
    for probe in probes():
        stack.fake.reset()
        stack.fake.queue(*[Script(done) for _ in range(4)])
        send(stack, probe, headers)
        if upstream(stack):  # whatever the replica then answered
            generating.append(probe)
        idle(stack)
    assert {(p.method, p.path) for p in generating} >= AT_LEAST, generating

    stack.fake.reset()
    stack.fake.queue(Script(ids(tokenizer, "busy"), hang=True))
    holder = Holder(stack.url + "/v1/responses", SHAPES["responses-stream"], headers)
    try:
        for probe in generating:
            sent = upstream(stack)
            status, retry_after = send(stack, probe, headers)
            assert status == 429, probe
            assert retry_after == "1" or probe.method == "WEBSOCKET", probe
            assert upstream(stack) == sent, probe  # nothing reached a replica
    finally:
        holder.release()
