"""The documented Codex setup against the real demo: `make demo-codex` (scripts/demo-codex.sh)
starts `vllm-gateway serve` with no upstream (the demo model on stock vLLM-CPU), runs the real
Codex CLI once with docs/codex.md's config (examples/codex/), and stops the demo."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "codex.md"
EXAMPLES = ROOT / "examples" / "codex"


def test_the_docs_show_the_example_config_verbatim():
    """What docs/codex.md tells people to copy is what `make demo-codex` (and the test below) runs."""
    blocks = re.findall(r"```(\w+)\n(.*?)```", DOCS.read_text(), re.DOTALL)
    assert ("toml", (EXAMPLES / "config.toml").read_text()) in blocks
    assert ("json", (EXAMPLES / "tiny-qwen3.json").read_text()) in blocks
    [entry] = json.loads((EXAMPLES / "tiny-qwen3.json").read_text())["models"]
    from gateway.ops._demo import DEMO_CONTEXT_LENGTH, DEMO_MODEL_NAME

    assert (entry["slug"], entry["context_window"]) == (DEMO_MODEL_NAME, DEMO_CONTEXT_LENGTH)


@pytest.fixture(scope="module")
def demo_model_dir() -> Path:
    from gateway.ops.tiny_models import demo_model_dir as build
    from tests.conftest import _built

    return _built(build)


@pytest.mark.codex
@pytest.mark.vllm
def test_demo_codex_completes_a_turn_against_the_real_demo(demo_model_dir, codex_bin):
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "GATEWAY_CODEX_BIN": str(codex_bin),
           "PROMPT": "Say hello."}
    env.pop("GATEWAY_UPSTREAM", None)
    try:
        result = subprocess.run([str(ROOT / "scripts" / "demo-codex.sh"), "--json"], env=env, capture_output=True,
                                text=True, stdin=subprocess.DEVNULL, timeout=900, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"make demo-codex did not finish within 900 s:\n{(exc.stderr or b'')[-4000:]!r}")
    assert result.returncode == 0, result.stderr[-6000:]
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert events[-1]["type"] == "turn.completed", result.stdout[-4000:]
    # A bounded answer: the demo model ends its answers, and never writes more than its 512-token limit.
    assert 0 < events[-1]["usage"]["output_tokens"] <= 512
    # Codex's own prompt and tools fit the demo's context, and every response completed.
    access = [line for line in result.stderr.splitlines() if "gateway.access" in line and "api=responses" in line]
    assert access and all("outcome=completed" in line for line in access), "\n".join(access)
    assert "context 32768 tokens, output limit 512 tokens per response" in result.stderr
    assert "Model metadata for" not in result.stdout + result.stderr  # the catalog is found
