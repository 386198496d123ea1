"""/metrics carries the gateway's series only: no `*_created` timestamp beside each counter and histogram."""

from __future__ import annotations

import httpx

from gateway.core.settings import Settings
from tests.support.fake_vllm import FakeVLLM
from tests.support.gateway_server import running_gateway


def test_metrics_have_no_created_series(qwen_tokenizer_dir):
    with FakeVLLM() as fake:
        settings = Settings(model=str(qwen_tokenizer_dir), upstreams=[fake.url], served_model_name="tiny-qwen3")
        with running_gateway(settings) as url:
            httpx.post(url + "/v1/responses", json={"model": "tiny-qwen3", "input": "hi", "max_output_tokens": 1})
            text = httpx.get(url + "/metrics").text
    assert "gateway_requests_total{" in text and "gateway_request_duration_seconds_bucket{" in text
    assert "_created" not in text
