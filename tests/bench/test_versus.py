"""`python -m bench --quick --only versus` against the session's real vLLM-CPU: the JSON's shape,
and what holds at any speed — every path ran every turn on the same growing history, and the
gateway's later prompts hold exactly what the model generated. No wall-clock asserts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATHS = ("vllm", "gateway_http", "gateway_ws")
SPREAD = {"median", "min", "max", "n"}

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def versus(vllm_qwen, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench")
    command = [sys.executable, "-m", "bench", "--quick", "--only", "versus", "--vllm", vllm_qwen.url, "--no-docs",
               "--out", str(out)]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    section = json.loads((out / "latest.json").read_text())["sections"]["versus"]
    assert section["quick"] and section["vllm"]
    return section["data"]


def test_every_path_ran_every_turn_on_the_same_history(versus):
    size, rows = versus["size"], versus["rows"]
    assert len(rows) == size["turns"] * size["repeats"] * len(PATHS)
    for path in PATHS:
        mine = sorted((r for r in rows if r["path"] == path), key=lambda r: (r["repeat"], r["turn"]))
        assert [r["turn"] for r in mine] == list(range(size["turns"])) * size["repeats"]
        assert all(r["output_tokens"] for r in mine)
        history = [r["history_tokens"] for r in mine[:size["turns"]]]
        assert history == sorted(history) and history[-1] > history[0] > 5_000  # Codex's instructions and tools
    # The same session on every path: the same history length, give or take the template's details.
    for turn in range(size["turns"]):
        lengths = [r["history_tokens"] for r in rows if r["turn"] == turn and r["repeat"] == 0]
        assert max(lengths) - min(lengths) <= 0.01 * max(lengths), lengths


def test_summary_has_each_paths_spread(versus):
    paths = versus["summary"]["paths"]
    assert set(paths) == set(PATHS)
    for path in PATHS:
        assert set(paths[path]["session"]["ttft_ms"]) == SPREAD
        assert len(paths[path]["turns"]) == versus["size"]["turns"]
    assert "render_ms" in paths["vllm"]["turns"][0]
    assert set(versus["summary"]["saving"]) == {"16k", "64k"}  # None in a quick run: its history stays short


def test_gateway_prompts_hold_exactly_what_the_model_generated(versus):
    for api in ("chat", "responses"):
        gateway, vllm = versus["exactness"][api]["gateway"], versus["exactness"][api]["vllm"]
        assert gateway["turns_checked"] == vllm["turns_checked"] == versus["size"]["exact_turns"] - 1
        assert gateway["generated_tokens"] > 0
        assert (gateway["turns_differing"], gateway["tokens_differing"], gateway["prefix_breaks"]) == (0, 0, 0)
    assert versus["exactness"]["chat"]["gateway"]["export_matches_responses"]
