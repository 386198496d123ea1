"""Metrics and logs: the real gateway in front of the scripted vLLM, scraped over /metrics.

Every scenario asserts the exact set of counters that moved (histogram counts included)
and by how much, so a request counted twice, under the wrong label, or not at all fails.
"""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

from gateway.core import logs
from gateway.core.logs import JSONFormatter, TextFormatter
from gateway.core.settings import Settings
from gateway.ops.vllm_process import free_port
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.gateway_server import running_gateway, wait_healthy
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.sse import sse_events
from tests.support.waiting import DEADLINE, PROCESS_START, wait_for

GENERATE = "/inference/v1/generate"
MODEL = "tiny-qwen3"
MAX_MODEL_LEN = 4096
# Gauges, the parts of histograms that depend on the clock, and the router's own figures
# (tests/upstream/test_prefix_routing_gateway.py) are not compared by `changes`.
LIVE = ("gateway_requests_in_progress", "gateway_replica_", "gateway_websocket_connections",
        "gateway_session_cache_sessions", "gateway_routing_", "gateway_prefix_index_", "gateway_kv_event")


# -- scraping ----------------------------------------------------------------------------

Samples = dict[str, float]


def scrape(url: str) -> Samples:
    response = httpx.get(url + "/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = ",".join(f'{key}="{value}"' for key, value in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def settled(url: str) -> Samples:
    """A scrape once no request is in progress: a request is counted in one step when it
    ends, which may be just after its client got the last byte."""
    deadline = time.monotonic() + DEADLINE
    while True:
        samples = scrape(url)
        if not any(value for key, value in samples.items() if key.startswith("gateway_requests_in_progress")):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"requests still in progress: {samples}")
        time.sleep(0.02)


def changes(before: Samples, after: Samples) -> dict[str, float]:
    """Counters and histogram counts that moved, by how much."""
    moved = {}
    for key, value in after.items():
        name = key.split("{")[0]
        if name.startswith(LIVE) or name.endswith(("_bucket", "_sum", "_created")):
            continue
        if value != before.get(key, 0.0):
            moved[key] = value - before.get(key, 0.0)
    return moved


def requests_line(api: str, outcome: str) -> str:
    return f'gateway_requests_total{{api="{api}",outcome="{outcome}"}}'


def per_api(name: str, api: str) -> str:
    return f'{name}{{api="{api}"}}'


def finished(api: str, outcome: str, count: int = 1, *, ttft: bool = True, itl: int = 0) -> dict[str, float]:
    """What any finished request adds: its outcome and duration, TTFT if it generated, and
    inter-token latency for the `itl` of them that generated more than one token."""
    moved = {requests_line(api, outcome): count, per_api("gateway_request_duration_seconds_count", api): count}
    if ttft:
        moved[per_api("gateway_time_to_first_token_seconds_count", api)] = count
    if itl:
        moved[per_api("gateway_inter_token_latency_seconds_count", api)] = itl
    return moved


def tokens(api: str, prompt: int, output: int) -> dict[str, float]:
    return {per_api("gateway_prompt_tokens_total", api): prompt, per_api("gateway_output_tokens_total", api): output}


# -- fixtures ----------------------------------------------------------------------------

pytestmark = pytest.mark.stack(fake={"model": MODEL, "max_model_len": MAX_MODEL_LEN})


@pytest.fixture
def url(stack):
    return stack.url


@pytest.fixture
def gateway_log() -> Iterator[Callable[[Callable[[dict], bool]], dict]]:
    """JSON lines the gateway logs while the test runs; the returned function waits for the
    first line that matches (lines are written when a request ends, after its last byte)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter())
    logger = logging.getLogger("gateway")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)

    def find(match: Callable[[dict], bool]) -> dict:
        wait_for(lambda: any(match(line) for line in lines()))
        return next(line for line in lines() if match(line))

    def lines() -> list[dict]:
        return [orjson.loads(line) for line in stream.getvalue().splitlines()]  # every line is JSON

    yield find
    logger.removeHandler(handler)
    logger.setLevel(level)


# -- HTTP ----------------------------------------------------------------------------------

def test_responses_request_counts_exact_tokens_and_logs_under_the_client_request_id(fake, url, tokenizer,
                                                                                     gateway_log):
    out = ids(tokenizer, "Hello there") + [IM_END]
    fake.queue(Script(out, stop_reason=IM_END))
    before = settled(url)
    response = httpx.post(url + "/v1/responses", json={"model": MODEL, "input": "Hi"},
                          headers={"X-Request-Id": "obs-client-1"})
    assert response.status_code == 200 and response.headers["x-request-id"] == "obs-client-1"
    prompt = fake.bodies(GENERATE)[-1]["token_ids"]
    assert response.json()["usage"]["input_tokens"] == len(prompt)
    assert changes(before, settled(url)) == {**finished("responses_http", "completed", itl=1),
                                             **tokens("responses_http", len(prompt), len(out))}

    line = gateway_log(lambda line: line["logger"] == "gateway.access" and line["request_id"] == "obs-client-1")
    assert {key: line[key] for key in ("level", "api", "outcome", "status", "model", "prompt_tokens",
                                       "output_tokens", "spliced", "finish_reason", "replica", "retries")} == {
        "level": "INFO", "api": "responses_http", "outcome": "completed", "status": 200, "model": MODEL,
        "prompt_tokens": len(prompt), "output_tokens": len(out), "spliced": False, "finish_reason": "stop",
        "replica": fake.url, "retries": 0}
    assert line["ttft"] <= line["duration"] and line["timestamp"].endswith("+00:00")
    # the id vLLM saw, so gateway and vLLM logs can be joined
    assert "generate-tokens-" + line["upstream_request_id"] in fake.completed


def test_request_ids_are_generated_and_echoed_on_every_route(url, gateway_log):
    health = httpx.get(url + "/health")
    assert health.headers["x-request-id"].startswith("req_")
    missing = httpx.post(url + "/v1/responses", json={"model": "nope", "input": "x"})
    request_id = missing.headers["x-request-id"]
    assert missing.status_code == 404 and request_id.startswith("req_") and request_id != health.headers[
        "x-request-id"]
    line = gateway_log(lambda line: line.get("request_id") == request_id)
    assert (line["api"], line["outcome"], line["status"]) == ("responses_http", "404", 404)
    assert "model" not in line  # nothing ran: no turn to describe
    # a header that could forge log lines is replaced, not echoed
    forged = httpx.post(url + "/v1/responses", json={}, headers={"X-Request-Id": "a b\tc"})
    assert forged.headers["x-request-id"].startswith("req_")


def test_chat_completions_streamed_and_cut_by_length(fake, url, tokenizer):
    streamed, cut = ids(tokenizer, "Fine, thanks") + [IM_END], ids(tokenizer, "One two")
    fake.queue(Script(streamed, stop_reason=IM_END), Script(cut, finish_reason="length"))
    before = settled(url)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "How are you?"}], "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body) as r:
        usage = sse_events(r)[-1]["usage"]
    r = httpx.post(url + "/v1/chat/completions", json={**body, "stream": False, "max_tokens": len(cut)})
    assert r.json()["choices"][0]["finish_reason"] == "length"
    prompts = [len(b["token_ids"]) for b in fake.bodies(GENERATE)]
    assert usage["prompt_tokens"] == prompts[0] and usage["completion_tokens"] == len(streamed)
    assert changes(before, settled(url)) == {
        **finished("chat", "completed"), **finished("chat", "incomplete"),
        per_api("gateway_request_duration_seconds_count", "chat"): 2,
        per_api("gateway_time_to_first_token_seconds_count", "chat"): 2,
        per_api("gateway_inter_token_latency_seconds_count", "chat"): 2,
        **tokens("chat", sum(prompts), len(streamed) + len(cut))}


def test_failures_count_by_outcome_and_status(fake, url, tokenizer):
    partial = ids(tokenizer, "Partial answer") + [IM_END]
    fake.queue(Script([], status=500), Script(partial, error_after=1))
    before = settled(url)
    # an upstream 500 before anything was generated: 503, nothing accepted
    r = httpx.post(url + "/v1/responses", json={"model": MODEL, "input": "q"})
    assert r.status_code == 503
    # the replica fails mid-stream after one token: response.failed
    with httpx.stream("POST", url + "/v1/responses", json={"model": MODEL, "input": "q", "stream": True}) as r:
        assert sse_events(r)[-1]["type"] == "response.failed"
    failed_prompt = len(fake.bodies(GENERATE)[-1]["token_ids"])
    # the prompt cannot fit: a failed response over SSE, a 400 over JSON; nothing sent upstream
    too_long = {"model": MODEL, "input": "q", "max_output_tokens": MAX_MODEL_LEN + 1}
    with httpx.stream("POST", url + "/v1/responses", json={**too_long, "stream": True}) as r:
        assert sse_events(r)[-1]["response"]["error"]["code"] == "context_length_exceeded"
    chat = httpx.post(url + "/v1/chat/completions", json={
        "model": MODEL, "messages": [{"role": "user", "content": "q"}], "max_tokens": MAX_MODEL_LEN + 1})
    assert chat.status_code == 400
    assert len(fake.bodies(GENERATE)) == 2
    assert changes(before, settled(url)) == {
        requests_line("responses_http", "503"): 1, requests_line("responses_http", "failed"): 2,
        per_api("gateway_request_duration_seconds_count", "responses_http"): 3,
        per_api("gateway_time_to_first_token_seconds_count", "responses_http"): 1,
        **tokens("responses_http", failed_prompt, 1),
        **finished("chat", "400", ttft=False)}


def test_non_monotonic_when_the_history_no_longer_continues_the_session(fake, url, tokenizer):
    fake.queue(Script(ids(tokenizer, "A") + [IM_END]), Script(ids(tokenizer, "B") + [IM_END]))
    before = settled(url)
    body = {"model": MODEL, "input": "first", "prompt_cache_key": "obs-fallback"}
    assert httpx.post(url + "/v1/responses", json=body).status_code == 200
    assert httpx.post(url + "/v1/responses", json={**body, "input": "rewritten"}).status_code == 200
    prompts = [len(b["token_ids"]) for b in fake.bodies(GENERATE)]
    assert changes(before, settled(url)) == {
        **finished("responses_http", "completed", 2, itl=2), **tokens("responses_http", sum(prompts), 4),
        "gateway_session_cache_misses_total": 1, "gateway_session_cache_hits_total": 1,
        per_api("gateway_non_monotonic_prompts_total", "responses_http"): 1}


# -- WebSocket -------------------------------------------------------------------------------

def ws_until_done(ws) -> dict:
    while True:
        event = orjson.loads(ws.recv(timeout=30))
        if event["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
            return event


def test_websocket_continuations_splice_and_hit_the_session_cache(fake, url, tokenizer):
    """A continuation on the socket splices from the connection's cache; a reconnect that
    resends the whole history under the same prompt_cache_key hits the session cache."""
    out1, out2, out3 = (ids(tokenizer, text) + [IM_END] for text in ("Hello world", "Fine", "Bye"))
    fake.queue(Script(out1), Script(out2), Script(out3))
    before = settled(url)
    create = {"type": "response.create", "model": MODEL, "prompt_cache_key": "obs-ws"}
    greet = {"type": "message", "role": "user", "content": "Greet"}
    ask = {"type": "message", "role": "user", "content": "How are you?"}
    with connect(url.replace("http", "ws") + "/v1/responses") as ws:
        ws.send(orjson.dumps({**create, "input": [greet]}).decode())
        first = ws_until_done(ws)["response"]
        assert scrape(url)["gateway_websocket_connections"] == 1
        ws.send(orjson.dumps({**create, "previous_response_id": first["id"], "input": [ask]}).decode())
        second = ws_until_done(ws)["response"]
    wait_for(lambda: scrape(url)["gateway_websocket_connections"] == 0)
    history = [greet, *first["output"], ask, *second["output"], {"type": "message", "role": "user", "content": "Bye"}]
    with connect(url.replace("http", "ws") + "/v1/responses") as ws:
        ws.send(orjson.dumps({**create, "input": history}).decode())
        assert ws_until_done(ws)["type"] == "response.completed"
    p1, p2, p3 = (b["token_ids"] for b in fake.bodies(GENERATE))
    assert p2[: len(p1) + len(out1)] == p1 + out1 and p3[: len(p2) + len(out2)] == p2 + out2  # real splices
    assert changes(before, settled(url)) == {
        **finished("responses_ws", "completed", 3, itl=3), **tokens("responses_ws", len(p1) + len(p2) + len(p3), len(out1) + len(out2) + len(out3)),
        per_api("gateway_splices_total", "responses_ws"): 2,
        per_api("gateway_spliced_prompt_tokens_total", "responses_ws"): len(p1) + len(out1) + len(p2) + len(out2),
        "gateway_session_cache_misses_total": 1, "gateway_session_cache_hits_total": 1}


def test_websocket_errors_count_by_status(fake, url):
    before = settled(url)
    with connect(url.replace("http", "ws") + "/v1/responses") as ws:
        ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "x",
                              "previous_response_id": "resp_unknown"}).decode())
        assert ws_until_done(ws)["status"] == 400
    assert changes(before, settled(url)) == finished("responses_ws", "400", ttft=False)


# -- replicas ------------------------------------------------------------------------------

def test_replica_gauges_follow_health_and_in_flight_streams(qwen_tokenizer_dir, tokenizer):
    with FakeVLLM(model=MODEL) as up, FakeVLLM(model=MODEL, healthy=False) as down:
        settings = Settings(model=str(qwen_tokenizer_dir), upstreams=[up.url, down.url], health_interval=0.1)
        with running_gateway(settings) as url:
            def gauge(name: str, replica: FakeVLLM) -> float:
                return scrape(url)[f'{name}{{replica="{replica.url}"}}']

            assert gauge("gateway_replica_healthy", up) == 1 and gauge("gateway_replica_healthy", down) == 0
            before = settled(url)
            # one token, then the replica keeps the stream open until the client leaves
            up.queue(Script(ids(tokenizer, "Hello"), hang=True))
            body = {"model": MODEL, "input": "Hi", "stream": True}
            with httpx.stream("POST", url + "/v1/responses", json=body) as r:
                lines = r.iter_lines()  # kept: a dropped line iterator would close the connection
                for line in lines:
                    if "response.output_text.delta" in line:
                        break
                assert gauge("gateway_replica_inflight", up) == 1 and gauge("gateway_replica_inflight", down) == 0
                assert scrape(url)['gateway_requests_in_progress{api="responses_http"}'] == 1
            wait_for(lambda: gauge("gateway_replica_inflight", up) == 0)
            prompt = len(up.bodies(GENERATE)[-1]["token_ids"])
            assert changes(before, settled(url)) == {**finished("responses_http", "cancelled"),
                                                     **tokens("responses_http", prompt, 1)}

            down.healthy = True
            wait_for(lambda: gauge("gateway_replica_healthy", down) == 1)
            # both replicas refuse before generating: the request is retried once, then fails
            before = settled(url)
            up.queue(Script([], status=500))
            down.queue(Script([], status=500))
            assert httpx.post(url + "/v1/responses", json={**body, "stream": False}).status_code == 503
            assert changes(before, settled(url)) == {**finished("responses_http", "503", ttft=False),
                                                     per_api("gateway_upstream_retries_total", "responses_http"): 1}


# -- log formats -----------------------------------------------------------------------------

def test_cli_json_logs_cover_uvicorn_and_the_gateway(fake, qwen_tokenizer_dir, tokenizer, tmp_path):
    port = free_port()
    stderr = (tmp_path / "stderr").open("w+")
    env = {**os.environ, "GATEWAY_LOG_FORMAT": "json"}
    process = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--upstream", fake.url, "--model",
                                str(qwen_tokenizer_dir), "--port", str(port)], stderr=stderr, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: process.poll() is not None or _answers(url), "the gateway answered", timeout=PROCESS_START)
        wait_healthy(url)
        fake.queue(Script(ids(tokenizer, "Hi") + [IM_END]))
        r = httpx.post(url + "/v1/responses", json={"model": MODEL, "input": "x"}, headers={"x-request-id": "cli-1"})
        assert r.status_code == 200 and r.headers["x-request-id"] == "cli-1"
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    stderr.seek(0)
    lines = [orjson.loads(line) for line in stderr.read().splitlines()]  # every line is a JSON object
    by_logger = {}
    for line in lines:
        by_logger.setdefault(line["logger"], []).append(line)
    assert any("Uvicorn running on" in line["message"] for line in by_logger["uvicorn.error"])
    (access,) = [line for line in by_logger["uvicorn.access"] if line.get("request_id") == "cli-1"]
    assert '"POST /v1/responses HTTP/1.1" 200' in access["message"]
    (turn,) = [line for line in by_logger["gateway.access"] if line.get("request_id") == "cli-1"]
    assert (turn["api"], turn["outcome"], turn["output_tokens"]) == ("responses_http", "completed", 2)


def _answers(url: str) -> bool:
    try:
        httpx.get(url + "/health")
    except httpx.TransportError:
        return False
    return True


def test_text_format_names_the_connection_and_request():
    formatter = TextFormatter()
    record = logging.LogRecord("gateway.access", logging.INFO, __file__, 1, "api=%s", ("chat",), None)
    connection, request = logs.connection_id.set("ws_1"), logs.request_id.set("req_2")
    try:
        assert formatter.format(record).endswith(" INFO gateway.access [ws_1] [req_2]: api=chat")
    finally:
        logs.connection_id.reset(connection)
        logs.request_id.reset(request)
    assert formatter.format(record).endswith(" INFO gateway.access: api=chat")
