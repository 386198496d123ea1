"""Per-tenant limits: one tenant over its concurrent requests or its tokens per minute gets a
429 with Retry-After (in its API's shape, over HTTP and WebSocket) while another tenant is
served; refusals and tokens are counted by tenant in /metrics.
"""

from __future__ import annotations

import re

import httpx
import orjson
import pytest
from websockets.sync.client import connect

from gateway.core.conversation import Conversation
from gateway.core.errors import APIError
from gateway.core.settings import Settings
from gateway.core.tenancy import Tenant
from gateway.server.app import create_app
from gateway.server.tenant_limits import Limits, TenantLimits
from gateway.tokenfix.record import TurnRecord
from tests.support.fake_vllm import Script
from tests.support.holder import Holder
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.stack import fake_stack
from tests.support.waiting import wait_for

MODEL = "tiny-qwen3"
ALICE, BOB = "sk-alice", "sk-bob"
GENERATE = "/inference/v1/generate"
BODY = {"model": MODEL, "input": "hi"}


@pytest.fixture
def stack(qwen_tokenizer_dir, tmp_path):
    (tmp_path / "keys").write_text(f"{ALICE} alice\n{BOB} bob\n")
    (tmp_path / "limits").write_text("# tenant limits\nalice tokens_per_minute=20  # on top of '*'\n"
                                     "* concurrent=1\n")
    with fake_stack(qwen_tokenizer_dir, served_model_name=MODEL, api_key_file=str(tmp_path / "keys"),
                    tenant_limits=str(tmp_path / "limits"), tenant_max_concurrent_requests=5) as stack:
        yield stack


def as_(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def metric(url: str, name: str, **labels: str) -> float:
    text = httpx.get(url + "/metrics").text
    selector = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))  # as exposed
    found = re.search(rf"^{name}{{{re.escape(selector)}}} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_a_tenant_over_its_concurrent_requests_gets_429s_and_the_other_is_served(stack, tokenizer):
    url, fake = stack.url, stack.fake
    fake.queue(Script(ids(tokenizer, "busy"), hang=True), Script(ids(tokenizer, "Hello.") + [IM_END]))
    holder = Holder(url + "/v1/responses", {**BODY, "stream": True}, as_(ALICE))
    refused = httpx.post(url + "/v1/responses", json=BODY, headers=as_(ALICE))
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"] == {
        "message": "This API key's tenant is over its limit of 1 concurrent requests; retry after 1 s.",
        "type": "rate_limit_error", "param": None, "code": "rate_limit_exceeded"}
    messages = httpx.post(url + "/v1/messages", headers={"x-api-key": ALICE},
                          json={"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    assert messages.status_code == 429 and messages.headers["retry-after"] == "1"
    assert messages.json()["type"] == "error" and messages.json()["error"]["type"] == "rate_limit_error"
    with connect(url.replace("http://", "ws://") + "/v1/responses", additional_headers=as_(ALICE)) as ws:
        ws.send(orjson.dumps({"type": "response.create", **BODY}).decode())
        error = orjson.loads(ws.recv(timeout=30))
    assert (error["type"], error["status"], error["error"]["code"]) == ("error", 429, "rate_limit_exceeded")
    assert len(fake.bodies(GENERATE)) == 1  # only the held request reached a replica
    served = httpx.post(url + "/v1/responses", json=BODY, headers=as_(BOB))
    assert served.status_code == 200 and served.json()["output"][0]["content"][0]["text"] == "Hello."
    assert metric(url, "gateway_tenant_limited_requests_total", tenant="alice", reason="concurrency") == 3
    assert metric(url, "gateway_tenant_requests_in_progress", tenant="alice") == 1
    holder.release()
    wait_for(lambda: metric(url, "gateway_tenant_requests_in_progress", tenant="alice") == 0)
    fake.queue(Script(ids(tokenizer, "Again.") + [IM_END]))
    assert httpx.post(url + "/v1/responses", json=BODY, headers=as_(ALICE)).status_code == 200


def test_a_tenant_over_its_tokens_per_minute_waits_for_them_to_age_out(stack, tokenizer):
    url, fake = stack.url, stack.fake
    out = ids(tokenizer, "Hello there, friend.") + [IM_END]
    fake.queue(Script(out), Script(out))
    long_input = "Tell me everything about the weather today and tomorrow, please."
    first = httpx.post(url + "/v1/responses", json={**BODY, "input": long_input}, headers=as_(ALICE)).json()
    spent = first["usage"]["input_tokens"] + first["usage"]["output_tokens"]
    assert spent == len(fake.bodies(GENERATE)[0]["token_ids"]) + len(out) and spent >= 20
    assert metric(url, "gateway_tenant_tokens_total", tenant="alice") == spent
    refused = httpx.post(url + "/v1/responses", json=BODY, headers=as_(ALICE))
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert 55 <= int(refused.headers["retry-after"]) <= 60  # when the first request's tokens age out
    assert "its 20 tokens per minute" in refused.json()["error"]["message"]
    assert httpx.post(url + "/v1/responses", json=BODY, headers=as_(BOB)).status_code == 200  # bob's budget: none
    assert metric(url, "gateway_tenant_limited_requests_total", tenant="alice", reason="tokens") == 1
    assert len(fake.bodies(GENERATE)) == 2


@pytest.mark.parametrize(("line", "error"), [("alice concurrent=0", "concurrent=N or tokens_per_minute=N"),
                                             ("alice speed=3", "got 'speed=3'"),
                                             ("al:ice concurrent=1", "is not a tenant name")])
def test_a_malformed_limits_file_is_refused_at_start(qwen_tokenizer_dir, tmp_path, line, error):
    (tmp_path / "limits").write_text(line + "\n")
    with pytest.raises(ValueError, match=re.escape(error)):
        create_app(Settings(model=str(qwen_tokenizer_dir), upstreams=["http://127.0.0.1:9"],
                            tenant_limits=str(tmp_path / "limits")))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def finished(prompt: int, output: int) -> TurnRecord:
    return TurnRecord("gen", MODEL, Conversation([]), prompt_ids=[1] * prompt, output_ids=[2] * output,
                      replica="http://replica")


def test_retry_after_is_when_enough_of_the_minutes_tokens_age_out():
    clock, alice = Clock(), Tenant("alice")
    limits = TenantLimits(Limits(tokens_per_minute=100), clock=clock)
    for prompt, output, at in ((30, 10, 0), (20, 20, 10), (50, 0, 25)):  # 40 + 40 + 50 tokens
        clock.now = 1000.0 + at
        limits.acquire(alice)
        limits.release(alice, finished(prompt, output))
    clock.now = 1030.0  # 130 >= 100; at t=60 the first 40 age out (90 < 100): retry after 30 s.
    with pytest.raises(APIError) as refused:
        limits.acquire(alice)
    assert (refused.value.status, refused.value.retry_after) == (429, 30)
    clock.now = 1059.5
    with pytest.raises(APIError) as refused:
        limits.acquire(alice)
    assert refused.value.retry_after == 1  # half a second left, rounded up
    clock.now = 1060.0
    limits.acquire(alice)  # 90 tokens in the minute: admitted
    limits.release(alice, None)  # refused before it reached a replica: nothing counted
    limits.acquire(alice)
    limits.acquire(alice)  # no concurrency limit
    # A request that failed before any replica took it costs nothing; its output would.
    limits.release(alice, TurnRecord("gen", MODEL, Conversation([]), prompt_ids=[1] * 500))
    limits.release(alice, None)
    limits.acquire(alice)
