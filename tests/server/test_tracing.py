"""Traces: the real gateway in front of the scripted vLLM, its spans caught by the SDK's
in-memory exporter. One span per request (per `response.create` on a WebSocket) continuing the
caller's `traceparent`, GenAI attributes read from the exact tokens, the replica handed the
span as its own `traceparent`, log lines with the trace id, no text on any span; and nothing at
all — no span, no header — with traces off.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import httpx
import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from websockets.sync.client import connect

from gateway.core import tracing
from gateway.core.logs import JSONFormatter
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.sse import sse_events
from tests.support.stack import fake_stack
from tests.support.waiting import wait_for

GENERATE = "/inference/v1/generate"
MODEL = "tiny-qwen3"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
PROMPT_TEXT = "Tell me the secret word"
PHASES = ("gateway.prepare.duration", "gateway.render.duration", "gateway.commit.duration")


pytestmark = pytest.mark.stack(fake={"model": MODEL, "max_model_len": 4096})


@pytest.fixture
def exported(stack) -> Iterator[InMemorySpanExporter]:
    """Traces on for the test: every ended span lands in the returned exporter."""
    stack.reset()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    yield exporter
    tracing.use(None)
    provider.shutdown()


def request_spans(exporter: InMemorySpanExporter, count: int = 1) -> list[ReadableSpan]:
    """The request spans, once `count` have ended (a span ends just after the client's last byte)."""
    wait_for(lambda: len([s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]) >= count)
    return [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    return format(span.context.trace_id, "032x"), format(span.context.span_id, "016x")


def parent_of(traceparent: str) -> tuple[str, str]:
    version, trace_id, span_id, flags = traceparent.split("-")
    assert version == "00" and int(flags, 16) & 1  # sampled
    return trace_id, span_id


def no_text(spans: list[ReadableSpan], *texts: str) -> bool:
    values = [str(v) for span in spans for v in dict(span.attributes or {}).values()]
    return not any(text in value for text in texts for value in values)


def test_a_streamed_response_is_one_span_in_the_callers_trace_and_the_replica_gets_it(stack, exported, tokenizer):
    out = ids(tokenizer, "The word is plum") + [IM_END]
    stack.fake.queue(Script(out, stop_reason=IM_END))
    body = {"model": MODEL, "input": PROMPT_TEXT, "stream": True, "temperature": 0.5, "top_p": 0.9,
            "max_output_tokens": 64}
    with httpx.stream("POST", stack.url + "/v1/responses", json=body,
                      headers={"traceparent": TRACEPARENT, "X-Request-Id": "traced-1"}) as response:
        events = sse_events(response)
    assert events[-1]["type"] == "response.completed"
    [span] = request_spans(exported)
    prompt = stack.fake.bodies(GENERATE)[-1]["token_ids"]

    assert span.name == "POST /v1/responses" and span.parent is not None
    assert hex_ids(span)[0] == CALLER_TRACE and format(span.parent.span_id, "016x") == CALLER_SPAN
    attributes = dict(span.attributes or {})
    phases = {name: attributes.pop(name) for name in PHASES}  # its phases' times, in seconds
    assert attributes == {
        "gateway.api": "responses_http", "gateway.request_id": "traced-1", "gateway.outcome": "completed",
        "http.response.status_code": 200, "gen_ai.response.id": events[-1]["response"]["id"]}
    assert all(0 < seconds for seconds in phases.values())
    assert sum(phases.values()) <= (span.end_time - span.start_time) / 1e9
    assert span.status.status_code == StatusCode.UNSET
    assert no_text(exported.get_finished_spans(), PROMPT_TEXT, "plum")  # privacy: no text without the flag

    # Two spans a request: its own, and the generation's under it, a client span (the call to vLLM).
    assert len(exported.get_finished_spans()) == 2
    [generation] = [s for s in exported.get_finished_spans() if s.parent and s.parent.span_id == span.context.span_id]
    assert (generation.name, generation.kind) == (f"chat {MODEL}", SpanKind.CLIENT)
    upstream_id = stack.fake.bodies(GENERATE)[-1]["request_id"]
    ttft = generation.attributes["gen_ai.latency.time_to_first_token"]
    assert 0 <= ttft <= (generation.end_time - generation.start_time) / 1e9
    assert dict(generation.attributes) == {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL, "gen_ai.request.temperature": 0.5,
        "gen_ai.request.top_p": 0.9, "gen_ai.request.max_tokens": 64, "gen_ai.response.id": upstream_id,
        "gen_ai.usage.input_tokens": len(prompt), "gen_ai.usage.output_tokens": len(out),
        "gen_ai.response.finish_reasons": ("stop",), "gen_ai.latency.time_to_first_token": ttft,
        "server.address": "127.0.0.1", "server.port": int(stack.fake.url.rsplit(":", 1)[1])}

    # The replica was handed the generation's span, so vLLM's own span joins the trace under it.
    assert parent_of(stack.fake.requests[-1].headers["traceparent"]) == (CALLER_TRACE, hex_ids(generation)[1])


def test_without_a_traceparent_the_request_starts_a_trace(stack, exported, tokenizer):
    stack.fake.queue(Script(ids(tokenizer, "Fine") + [IM_END], stop_reason=IM_END))
    r = httpx.post(stack.url + "/v1/chat/completions",
                   json={"model": MODEL, "messages": [{"role": "user", "content": "How are you?"}], "seed": 7})
    assert r.status_code == 200
    [span] = request_spans(exported)
    assert span.parent is None and span.name == "POST /v1/chat/completions"
    [generation] = [s for s in exported.get_finished_spans() if s.name == f"chat {MODEL}"]
    assert span.attributes["gateway.api"] == "chat" and generation.attributes["gen_ai.request.seed"] == 7
    assert parent_of(stack.fake.requests[-1].headers["traceparent"])[0] == hex_ids(span)[0]
    assert span.attributes["gen_ai.response.id"] == r.json()["id"]


def test_each_response_on_a_websocket_is_its_own_span_under_the_handshakes_traceparent(stack, exported,
                                                                                         tokenizer):
    stack.fake.queue(Script(ids(tokenizer, "One") + [IM_END], stop_reason=IM_END),
                     Script(ids(tokenizer, "Two") + [IM_END], stop_reason=IM_END))
    url = stack.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers={"traceparent": TRACEPARENT}) as socket:
        for text in ("first", "second"):
            socket.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": text}).decode())
            while orjson.loads(socket.recv())["type"] != "response.completed":
                pass
    spans = request_spans(exported, 2)
    assert [s.name for s in spans] == ["response.create", "response.create"]
    assert {hex_ids(s)[0] for s in spans} == {CALLER_TRACE}
    assert {format(s.parent.span_id, "016x") for s in spans} == {CALLER_SPAN}
    assert len({s.attributes["gateway.request_id"] for s in spans}) == 2
    assert all(s.attributes["gateway.api"] == "responses_ws" and "http.response.status_code" not in s.attributes
               for s in spans)
    sent = [parent_of(r.headers["traceparent"]) for r in stack.fake.requests if r.path == GENERATE]
    span_ids = {hex_ids(s)[1] for s in exported.get_finished_spans()}
    assert len(sent) == 2 and all(t == CALLER_TRACE and p in span_ids for t, p in sent)


def test_a_request_its_caller_did_not_sample_records_nothing_and_says_so_upstream(stack, exported, tokenizer):
    for word in ("No", "Yes"):
        stack.fake.queue(Script(ids(tokenizer, word) + [IM_END], stop_reason=IM_END))
    unsampled = f"00-{CALLER_TRACE}-{CALLER_SPAN}-00"
    assert httpx.post(stack.url + "/v1/responses", json={"model": MODEL, "input": "x"},
                      headers={"traceparent": unsampled}).status_code == 200
    # The replica gets the caller's trace, unsampled: vLLM records nothing of it either.
    version, trace_id, _, flags = stack.fake.requests[-1].headers["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", CALLER_TRACE, "00")
    assert httpx.post(stack.url + "/v1/responses", json={"model": MODEL, "input": "y"},
                      headers={"traceparent": TRACEPARENT}).status_code == 200
    request_spans(exported)  # the sampled request's spans are all there is
    assert sorted(s.name for s in exported.get_finished_spans()) == ["POST /v1/responses", f"chat {MODEL}"]


def test_a_failed_generation_marks_its_span_failed(stack, exported, tokenizer):
    stack.fake.queue(Script(ids(tokenizer, "a b c"), error_after=1))
    r = httpx.post(stack.url + "/v1/responses", json={"model": MODEL, "input": "x"})
    [span] = request_spans(exported)
    assert r.status_code >= 500 and span.attributes["http.response.status_code"] == r.status_code
    assert span.status.status_code == StatusCode.ERROR and span.attributes["gateway.outcome"] == str(r.status_code)
    assert span.attributes["error.type"] == r.json()["error"]["code"]


def test_log_lines_carry_the_trace_id_beside_the_request_id(stack, exported, tokenizer):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter())
    logger = logging.getLogger("gateway.access")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        stack.fake.queue(Script(ids(tokenizer, "Hi") + [IM_END], stop_reason=IM_END))
        httpx.post(stack.url + "/v1/responses", json={"model": MODEL, "input": "x"},
                   headers={"traceparent": TRACEPARENT, "X-Request-Id": "traced-log"})
        [span] = request_spans(exported)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    [line] = [orjson.loads(text) for text in stream.getvalue().splitlines()]
    assert (line["request_id"], line["trace_id"], line["span_id"]) == ("traced-log", *hex_ids(span))


def test_with_traces_off_there_is_no_span_and_no_header(stack, tokenizer):
    stack.reset()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))  # a provider the gateway was not given
    stack.fake.queue(Script(ids(tokenizer, "Hi") + [IM_END], stop_reason=IM_END))
    r = httpx.post(stack.url + "/v1/responses", json={"model": MODEL, "input": "x"},
                   headers={"traceparent": TRACEPARENT})
    assert r.status_code == 200 and tracing.tracer is None
    assert "traceparent" not in stack.fake.requests[-1].headers
    assert exporter.get_finished_spans() == ()


def test_waiting_on_a_tenants_limits_is_timed_on_the_request_span(qwen_tokenizer_dir, exported, tokenizer):
    with fake_stack(qwen_tokenizer_dir, fake={"model": MODEL, "max_model_len": 4096}, api_keys=["key-1"],
                    tenant_max_concurrent_requests=2) as keyed:
        keyed.fake.queue(Script(ids(tokenizer, "Hi") + [IM_END], stop_reason=IM_END))
        r = httpx.post(keyed.url + "/v1/responses", json={"model": MODEL, "input": "x"},
                       headers={"Authorization": "Bearer key-1"})
        assert r.status_code == 200
        [span] = request_spans(exported)
    assert 0 < span.attributes["gateway.admission.duration"] <= (span.end_time - span.start_time) / 1e9
    assert [s.name for s in exported.get_finished_spans()] == [f"chat {MODEL}", "POST /v1/responses"]


def test_text_is_on_the_generation_span_only_when_asked(stack, exported, tokenizer):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    tracing.use(provider, content=True)  # --otlp-traces-capture-content
    stack.fake.queue(Script(ids(tokenizer, "The word is plum") + [IM_END], stop_reason=IM_END))
    r = httpx.post(stack.url + "/v1/responses", json={"model": MODEL, "input": PROMPT_TEXT})
    assert r.status_code == 200
    request_spans(exported)
    [generation] = [s for s in exported.get_finished_spans() if s.name == f"chat {MODEL}"]
    assert orjson.loads(generation.attributes["gen_ai.input.messages"])[-1] == {
        "role": "user", "parts": [{"type": "text", "content": PROMPT_TEXT}]}
    [output] = orjson.loads(generation.attributes["gen_ai.output.messages"])
    assert output["parts"][0]["content"] == tokenizer.decode(ids(tokenizer, "The word is plum") + [IM_END])
    assert output["finish_reason"] == "stop"
