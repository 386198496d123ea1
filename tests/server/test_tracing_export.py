"""The real `vllm-gateway serve` exporting its spans by OTLP to a real receiver on loopback, in
both protocols, enabled both ways: `--otlp-traces-endpoint` (http/protobuf, the default) and the
standard variables alone (grpc). The receiver decodes what arrives with opentelemetry-proto.
"""

from __future__ import annotations

import signal

import httpx
import pytest

from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.gateway_process import gateway_process
from tests.support.otlp_receiver import otlp_receiver
from tests.support.qwen3_tokens import IM_END, ids

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{CALLER_TRACE}-b7ad6b7169203331-01"
SERVER = 2  # the proto's SPAN_KIND_SERVER


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_the_gateway_exports_its_request_spans(protocol, qwen_tokenizer_dir, tokenizer, tmp_path):
    out = ids(tokenizer, "Exported") + [IM_END]
    with otlp_receiver(protocol) as receiver, FakeVLLM(model="tiny-qwen3", max_model_len=4096) as fake:
        if protocol == "grpc":  # the standard variables alone; a batch held until the gateway stops
            args: tuple[str, ...] = ()
            env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
                   "OTEL_SERVICE_NAME": "gateway-under-test", "OTEL_BSP_SCHEDULE_DELAY": "600000"}
        else:
            args = ("--otlp-traces-endpoint", receiver.endpoint)
            env = {"OTEL_BSP_SCHEDULE_DELAY": "50"}
        fake.queue(Script(out, stop_reason=IM_END))
        with gateway_process(qwen_tokenizer_dir, [fake.url], tmp_path / "gw.log", *args, env=env) as (url, process):
            r = httpx.post(url + "/v1/responses", json={"model": "tiny-qwen3", "input": "Hi", "stream": True},
                           headers={"traceparent": TRACEPARENT})
            assert r.status_code == 200
            if protocol == "grpc":
                assert receiver.requests == 0  # still batched: only the shutdown sends it
                process.send_signal(signal.SIGTERM)
                assert process.wait(timeout=60) == 0
            span = receiver.wait_for(lambda s: s.kind == SERVER and s.name == "POST /v1/responses")
            generation = receiver.wait_for(lambda s: s.name == "chat tiny-qwen3")
    assert span.service == ("gateway-under-test" if protocol == "grpc" else "vllm-gateway")
    assert span.trace_id == CALLER_TRACE and span.parent_span_id == "b7ad6b7169203331"
    assert span.attributes["gateway.outcome"] == "completed" and span.end_ns > span.start_ns
    assert generation.parent_span_id == span.span_id and generation.trace_id == CALLER_TRACE
    assert generation.attributes["gen_ai.usage.output_tokens"] == len(out)
    assert generation.attributes["gen_ai.usage.input_tokens"] == \
        len(fake.bodies("/inference/v1/generate")[-1]["token_ids"])
    assert generation.attributes["gen_ai.request.model"] == "tiny-qwen3"
    sent = fake.requests[-1].headers["traceparent"].split("-")
    assert sent[1] == CALLER_TRACE and sent[2] in {s.span_id for s in receiver.spans}
