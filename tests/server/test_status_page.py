"""The status page's data and its keys, on the scripted stack (the real-vLLM run with a real
browser is tests/real_vllm/test_status_page.py): /status.json says what each replica is doing
and why, the last minutes' traffic and errors, what is held and the store's health; with API
keys configured it is the admin key's alone, while the page's shell stays open."""

from __future__ import annotations

import httpx
import pytest

from gateway.core.settings import Settings
from gateway.server._recent import Recent
from gateway.server.app import build_runtime
from tests.support.fake_vllm import Script
from tests.support.gateway_server import running_gateway

pytestmark = pytest.mark.stack(replicas=2)

ADMIN, TENANT = "admin-key-0123456789", "tenant-key-0123456789"


def test_the_page_and_its_script_are_served_from_the_package(stack):
    page = httpx.get(stack.url + "/status")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert '<script src="/status.js"></script>' in page.text and "http" not in page.text.replace("http://www.w3", "")
    script = httpx.get(stack.url + "/status.js")
    assert script.status_code == 200 and "fetch(\"/status.json\"" in script.text


def test_status_json_has_a_row_per_replica_and_the_traffic_just_served(stack, fake):
    for replica in stack.fakes:  # whichever the router picks
        replica.queue(Script([9707, 1879, 11, 151645], finish_reason="stop", stop_reason=151645))
    answer = stack.client().responses.create(model="tiny-qwen3", input="Hi", max_output_tokens=16)
    assert answer.status == "completed"
    stack.reset()
    for replica in stack.fakes:
        replica.queue(Script([], status=400, error_message="bad sampling"))
    failed = httpx.post(stack.url + "/v1/responses", json={"model": "tiny-qwen3", "input": "Hi"})
    assert failed.status_code == 400

    status = httpx.get(stack.url + "/status.json").json()
    rows = {row["url"]: row for row in status["replicas"]}
    assert set(rows) == {f.url for f in stack.fakes}
    assert {row["state"] for row in rows.values()} == {"ready"} and {row["reason"] for row in rows.values()} == {""}
    assert sum(row["requests"] for row in rows.values()) == 2
    assert {(row["weight_version"], tuple(row["adapters"])) for row in rows.values()} == {("default", ())}
    traffic = status["traffic"]
    assert traffic["step_s"] == 5.0 and len(traffic["requests_per_s"]) == 120
    assert sum(traffic["requests_per_s"]) * traffic["step_s"] >= 2  # this module's earlier tests count too
    assert [ms for ms in traffic["ttft_ms"] if ms is not None] and [ms for ms in traffic["itl_ms"] if ms is not None]
    assert status["errors"] == {"by_kind": {"upstream_rejected": 1}, "cancelled": 0}
    assert status["store"] == {"kind": "memory", "fallbacks": {}, "status": "ok", "detail": "in this process"}
    assert status["held"]["sessions"] >= 0 and status["held"]["conversations"] == 0
    assert status["gateway"]["routing"] == "prefix" and status["routing"]["panic_routes"] == 0


def test_an_ejected_replica_says_why(stack):
    victim = stack.runtime.pool.replicas[1]
    victim.eject("unreachable: connection refused", kind="unreachable", hold=True)
    try:
        rows = {r["url"]: r for r in httpx.get(stack.url + "/status.json").json()["replicas"]}
        row = rows[victim.url]
        assert row["state"] == "ejected" and row["ejections"]["unreachable"] >= 1
        assert row["reason"].startswith("unreachable: connection refused (unreachable, held out ")
    finally:
        victim.wake.set()  # its health check readmits it (the fake is up)


def test_the_data_is_the_admin_keys_when_keys_are_set(qwen_tokenizer_dir, stack):
    settings = Settings(model=str(qwen_tokenizer_dir), upstreams=[stack.fake.url], served_model_name="tiny-qwen3",
                        api_keys=[TENANT], admin_key=ADMIN)
    with running_gateway(settings, build_runtime(settings)) as url:
        assert httpx.get(url + "/status").status_code == 200  # the shell holds no data
        assert httpx.get(url + "/status.js").status_code == 200
        missing = httpx.get(url + "/status.json")
        assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"
        tenant = httpx.get(url + "/status.json", headers={"authorization": f"Bearer {TENANT}"})
        assert tenant.status_code == 403
        assert tenant.json()["error"] == {
            "message": "The status page's data needs the admin key (--admin-key); this key is a tenant's.",
            "type": "permission_error", "param": None, "code": "admin_key_required"}
        admin = httpx.get(url + "/status.json", headers={"authorization": f"Bearer {ADMIN}"})
        assert admin.status_code == 200 and admin.json()["object"] == "gateway.status"


def test_recent_buckets_roll_over_and_average():
    now = [1000.0]
    recent = Recent(step=5.0, steps=4, clock=lambda: now[0])
    recent.add("completed", None, 0.010, 0.002, 5)
    recent.add("completed", None, 0.030, None, 1)
    recent.add("502", "upstream_unavailable", None, None, 0)
    recent.add("cancelled", None, None, None, 0)
    now[0] += 10.0  # two buckets on
    recent.add("failed", None, 0.5, 0.004, 3)
    series = recent.series()
    assert series["requests_per_s"] == [0, 0.8, 0, 0.2]
    assert series["ttft_ms"] == [None, 20.0, None, 500.0] and series["itl_ms"] == [None, 2.0, None, 4.0]
    assert series["errors"] == [0, 1, 0, 1] and series["tokens_per_s"] == [0, 1.2, 0, 0.6]
    assert dict(recent.errors) == {"upstream_unavailable": 1, "failed": 1} and recent.cancelled == 1
    now[0] += 20.0  # a whole lap: everything shown is gone
    assert recent.series()["requests_per_s"] == [0, 0, 0, 0]
