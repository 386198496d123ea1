"""/metrics with `--state-url`: the shared store's own figures (memory, keys, evictions) beside
this process's cache, read with one INFO per scrape; absent while the store cannot answer."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway.core.settings import Settings
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.gateway_server import running_gateway
from tests.support.redis_server import RedisServer


def _scrape(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics").text
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_report_the_shared_stores_figures(qwen_tokenizer_dir):
    with RedisServer() as redis, FakeVLLM() as fake, running_gateway(Settings(
            model=str(qwen_tokenizer_dir), upstreams=[fake.url], served_model_name="tiny-qwen3",
            state_url=redis.url)) as url:
        before = _scrape(url)
        assert before["gateway_state_store_keys"] == 0
        fake.queue(Script([9707, 151645]))
        response = httpx.post(url + "/v1/responses", json={"model": "tiny-qwen3", "input": "hi", "store": False,
                                                           "prompt_cache_key": "thread-1"}, timeout=30)
        assert response.status_code == 200
        after = _scrape(url)
        assert after["gateway_state_store_keys"] == 2  # the session's header and its token log
        assert after["gateway_state_store_memory_bytes"] > 0
        assert after["gateway_session_cache_sessions"] == 1  # this process's cache of it
        assert after["gateway_state_store_evicted_keys_total"] == 0
        redis.stop()
        down = _scrape(url)
        assert "gateway_state_store_keys" not in down
        assert down["gateway_session_cache_sessions"] == 1
