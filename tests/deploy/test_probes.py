"""The probes the Kubernetes manifests use: /live answers whatever vLLM's state (a liveness probe
must not restart a gateway whose vLLM is still loading), /ready follows vLLM's readiness."""

from __future__ import annotations

import httpx

from gateway.core.settings import Settings
from gateway.ops.vllm_process import free_port
from gateway.server.app import create_app
from tests.support.fake_vllm import FakeVLLM
from tests.support.gateway_server import running_gateway, wait_healthy


def test_live_whatever_the_replicas_ready_only_with_one(qwen_tokenizer_dir) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens: a vLLM still loading
    with running_gateway(Settings(model=str(qwen_tokenizer_dir), upstreams=[nowhere])) as url:
        assert httpx.get(url + "/live").json() == {"status": "alive"}
        assert httpx.get(url + "/ready").status_code == 503
        assert httpx.get(url + "/health").status_code == 503
    with FakeVLLM() as fake, running_gateway(Settings(model=str(qwen_tokenizer_dir), upstreams=[fake.url])) as url:
        wait_healthy(url)
        assert httpx.get(url + "/ready").status_code == 200
        assert httpx.get(url + "/live").status_code == 200


async def test_live_while_draining() -> None:
    # Kubernetes keeps probing liveness during the drain that follows SIGTERM.
    app = create_app(Settings(model="unused"))
    app.state.drain.draining = True
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as client:
        assert (await client.get("/live")).status_code == 200
        assert (await client.post("/v1/responses", json={})).status_code == 503
