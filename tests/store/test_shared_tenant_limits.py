"""Per-tenant limits held together by two `vllm-gateway serve` processes on one real Redis
(gateway/store/redis/limits.py): a tenant's request in flight on one process takes its only
slot on the other too, and tokens spent through one count against the minute on the other."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.gateway_process import gateway_process
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_for

MODEL = "tiny-qwen3"
ALICE, BOB, CAROL = "key-alice-0123456789", "key-bob-0123456789", "key-carol-0123456789"


@pytest.fixture(scope="module")
def two(qwen_tokenizer_dir, redis_server: RedisServer, tmp_path_factory) -> Iterator[tuple[FakeVLLM, list[str]]]:
    home = tmp_path_factory.mktemp("shared-limits")
    (home / "keys").write_text(f"{ALICE} alice\n{BOB} bob\n{CAROL} carol\n")
    (home / "limits").write_text("alice concurrent=1\nbob tokens_per_minute=30\n")
    with ExitStack() as stack:
        fake = stack.enter_context(FakeVLLM())
        urls = [stack.enter_context(gateway_process(
            qwen_tokenizer_dir, [fake.url], home / f"gateway{i}.log", "--state-url", redis_server.url,
            "--api-key-file", str(home / "keys"), "--tenant-limits", str(home / "limits")))[0] for i in range(2)]
        yield fake, urls


def _post(url: str, key: str, **body: object) -> httpx.Response:
    return httpx.post(url + "/v1/responses", json={"model": MODEL, "input": "hi", **body},
                      headers={"authorization": f"Bearer {key}"}, timeout=60)


def _refused(response: httpx.Response, reason: str) -> None:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and reason in error["message"]
    assert 1 <= int(response.headers["retry-after"]) <= 60


def test_a_request_in_flight_on_one_process_takes_the_tenants_only_slot_on_the_other(two):
    fake, (first, second) = two
    fake.reset()
    fake.queue(Script([9707], hang=True))  # streams "Hello", then holds the slot until the client leaves
    started, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with httpx.stream("POST", first + "/v1/responses", json={"model": MODEL, "input": "hi", "stream": True},
                          headers={"authorization": f"Bearer {ALICE}"}, timeout=60) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if "response.output_text.delta" in line:
                    started.set()
                    leave.wait(60)
                    return

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert started.wait(60)
        _refused(_post(second, ALICE), "1 concurrent requests")
        fake.queue(Script([9707, 151645]))
        assert _post(second, CAROL).status_code == 200  # another tenant is not held back
    finally:
        leave.set()
        holder.join()
    wait_for(lambda: len(fake.disconnected) == 1, "the held generation was aborted")
    fake.queue(Script([9707, 151645]))
    response = _post(second, ALICE)  # the slot came back to the shared count
    assert response.status_code == 200, response.text


def test_tokens_spent_through_one_process_count_against_the_minute_on_the_other(two):
    fake, (first, second) = two
    fake.reset()
    fake.queue(Script([9707] * 40, finish_reason="length"))
    spent = _post(first, BOB, max_output_tokens=40)
    assert spent.status_code == 200, spent.text
    assert spent.json()["usage"]["output_tokens"] == 40
    _refused(_post(second, BOB), "30 tokens per minute")
    _refused(_post(first, BOB), "30 tokens per minute")
