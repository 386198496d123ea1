"""The gateway's memory under hostile input, read from a real `vllm-gateway serve` process's
/proc/PID/status: a 20 MB body that cannot fit the context is refused by the length pre-check
(gateway/formats/length.py) without being rendered, and a run of fuzzed bodies and junk 2 MB
reasoning blobs (the bounded blob cache, gateway/adapters/reasoning_blob.py) leaves RSS under
1.5× its warm-up figure. Deterministic: the same bodies every run."""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import httpx
import pytest
from hypothesis import given, settings

from tests.server.test_fuzz_requests import FUZZ, MODEL, SEEDS, mutated
from tests.support.fake_vllm import FakeVLLM
from tests.support.gateway_process import gateway_process, memory_kb

MB = 1024  # kB


@pytest.fixture(scope="module")
def gateway(qwen_tokenizer_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("memory") / "gateway.log"
    with FakeVLLM() as fake, gateway_process(qwen_tokenizer_dir, [fake.url], log) as (url, process), \
            httpx.Client(base_url=url, timeout=120) as client:
        yield client, process.pid


def _warm_up(client: httpx.Client) -> None:
    for stream in (False, True, False):
        assert client.post("/v1/responses", json={**SEEDS["/v1/responses"][0], "stream": stream}).status_code == 200
        assert client.post("/v1/chat/completions", json={**SEEDS["/v1/chat/completions"][0],
                                                         "stream": stream}).status_code == 200
    assert client.post("/v1/responses", json=_junk_blob(random.Random(0))).status_code < 500


def _junk_blob(rng: random.Random) -> dict[str, Any]:
    blob = base64.b64encode(rng.randbytes(1_500_000)).decode()  # 2 MB of base64
    return {"model": MODEL, "max_output_tokens": 4, "input": [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "summary": [], "encrypted_content": blob},
        {"role": "user", "content": "again"}]}


def _fuzz(client: httpx.Client, path: str) -> None:
    @settings(FUZZ, max_examples=100)
    @given(body=mutated(SEEDS[path]))
    def send(body: dict[str, Any]) -> None:
        response = client.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
        assert response.status_code < 500, response.text[:500]

    send()


@pytest.mark.parametrize("route", ["/v1/responses", "/v1/chat/completions"])
def test_a_20mb_body_that_cannot_fit_is_refused_before_rendering(gateway, route):
    client, pid = gateway
    _warm_up(client)
    text = "word " * 4_000_000  # 20 MB: at least 156,250 tokens (128 bytes a token at most) > 32,768
    body = {"model": MODEL, "input": text} if route == "/v1/responses" else \
        {"model": MODEL, "messages": [{"role": "user", "content": text}]}
    payload = json.dumps(body).encode()
    del text, body
    before = memory_kb(pid)
    response = client.post(route, content=payload, headers={"content-type": "application/json"})
    after = memory_kb(pid)
    assert response.status_code == 400, response.text[:500]
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] in ("input", "messages")
    assert "at least 156250 input tokens" in error["message"]
    assert after["VmRSS"] - before["VmRSS"] < 50 * MB, (before, after)
    # at its peak, the body's bytes and its parsed text (~60 MB here), not a render (1.5 GB)
    assert max(after["VmHWM"], before["VmHWM"]) - before["VmRSS"] < 100 * MB, (before, after)


def test_hostile_input_keeps_rss_under_one_and_a_half_times_its_warm_up(gateway):
    client, pid = gateway
    _warm_up(client)
    warm = memory_kb(pid)["VmRSS"]

    for path in SEEDS:
        _fuzz(client, path)
    rng = random.Random(23)
    for _ in range(300):
        assert client.post("/v1/responses", json=_junk_blob(rng)).status_code < 500
    final = memory_kb(pid)["VmRSS"]
    assert final < 1.5 * warm, (warm, final)
