"""`vllm-gateway serve` (and `launch`, which serves through the same `run`) relays on uvloop:
uvicorn's `--loop auto` picks it when it is installed, and it is a dependency."""

from __future__ import annotations

import httpx

from tests.support.fake_vllm import FakeVLLM
from tests.support.gateway_process import gateway_process


def test_serve_runs_on_uvloop(qwen_tokenizer_dir, tmp_path):
    log = tmp_path / "gw.log"
    with FakeVLLM() as fake, gateway_process(qwen_tokenizer_dir, [fake.url], log) as (url, _):
        assert httpx.get(url + "/health").status_code == 200
    assert "event loop: uvloop" in log.read_text()
