"""The real Claude Code CLI against the gateway's Anthropic Messages API, offline.

`claude -p … --output-format json` with `ANTHROPIC_BASE_URL` at the gateway and every
non-essential request off: it sends the whole history each turn under its session id,
runs the Bash tool the model called, and the next prompt continues the earlier turn's
exact ids (tokenized here as no tokenizer would, so a re-render would show).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from gateway.core.settings import Settings
from tests.support.fake_vllm import Script
from tests.support.gateway_server import running_gateway
from tests.support.qwen3_tokens import END_THINK, END_TOOL_CALL, IM_END, THINK, TOOL_CALL, ids
from tests.support.stack import fake_stack

pytestmark = pytest.mark.claude_code


def run_claude(binary: Path, url: str, home: Path, prompt: str, tools: str = "Bash", **env: str) -> dict:
    home.mkdir(exist_ok=True)
    environment = {"PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_BASE_URL": url,
                   "ANTHROPIC_API_KEY": "dummy", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
                   "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", **env}
    done = subprocess.run([str(binary), "-p", prompt, "--output-format", "json", "--model", "tiny-qwen3",
                           "--allowedTools", tools], env=environment, cwd=home, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


def test_tool_session_is_exact(claude_code_bin, qwen_tokenizer_dir, tokenizer, tmp_path):
    call = [THINK, *ids(tokenizer, "\nRun it.\n"), END_THINK, *ids(tokenizer, "\n\n"), TOOL_CALL,
            *ids(tokenizer, '\n{"name": "Bash", "arguments": {"command": "echo '), *ids(tokenizer, "gate"),
            *ids(tokenizer, "way-ok"), *ids(tokenizer, '", "description": "Print a word"}}\n'), END_TOOL_CALL, IM_END]
    answer = [THINK, *ids(tokenizer, "\nDone.\n"), END_THINK, *ids(tokenizer, "\n\nIt printed gateway-ok."), IM_END]
    with fake_stack(qwen_tokenizer_dir, served_model_name="tiny-qwen3") as stack:
        stack.fake.queue(Script(call), Script(answer))
        result = run_claude(claude_code_bin, stack.url, tmp_path / "home", "print gateway-ok with bash")
        first, second = [r.body["token_ids"] for r in stack.fake.requests]
    assert result["is_error"] is False and result["num_turns"] == 2, result
    assert result["result"] == "It printed gateway-ok."
    assert second[:len(first) + len(call)] == first + call  # the earlier turn's exact ids
    tool_output = ids(tokenizer, "<tool_response>\ngateway-ok\n</tool_response>")[1:]  # Bash really ran
    assert any(second[i:i + len(tool_output)] == tool_output for i in range(len(first), len(second)))


@pytest.mark.vllm
def test_one_turn_against_real_vllm(claude_code_bin, vllm_qwen, qwen_model_dir, tmp_path):
    """A turn of the tiny random model reaches Claude Code through the gateway: its prompt
    (Claude Code's ~11k tokens) and its output, which ends at the 16-token cap (random tokens
    rarely say end-of-turn; Claude Code then retries and reports the cap, no HTTP error)."""
    with running_gateway(Settings(model=str(qwen_model_dir), upstreams=[vllm_qwen.url])) as url:
        result = run_claude(claude_code_bin, url, tmp_path / "home", "say hi", CLAUDE_CODE_MAX_OUTPUT_TOKENS="16")
    assert result.get("api_error_status") is None, result  # no HTTP error: every request was answered
    assert result["is_error"] is False or result.get("api_error") == "max_output_tokens", result
    assert 1 <= result["usage"]["output_tokens"] <= 16 * result["num_turns"] and result["usage"]["input_tokens"] > 1000
