"""The benchmark runner end to end in its smoke mode: instant token server only, a few requests.

Checks the shape of what it writes and the invariants that do not depend on speed (every
token relayed, every socket open, session tokens stored compactly). No wall-clock asserts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PERCENTILES = {"p50", "p90", "p99", "min", "max", "n"}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench")
    command = [sys.executable, "-m", "bench", "--smoke", "--vllm", "off", "--no-docs", "--out", str(out),
               "--only", "latency", "--only", "relay", "--only", "steady", "--only", "memory"]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    [stamped] = out.glob("run-*.json")
    latest = json.loads((out / "latest.json").read_text())
    assert json.loads(stamped.read_text())["sections"] == latest["sections"]
    return latest


def test_machine_is_described(results):
    machine = results["machine"]
    assert machine["cores"] >= 1 and machine["ram_gb"] > 0 and machine["python"].startswith("3.")


def test_latency_compares_the_gateway_with_the_same_upstream(results):
    section = results["sections"]["latency"]
    assert section["smoke"] and not section["vllm"]
    [row] = section["data"]
    assert row["upstream"] == "instant token server" and row["requests"] == 20
    for metric in ("ttft_ms", "total_ms"):
        assert set(row[f"direct_{metric}"]) == PERCENTILES == set(row[f"gateway_{metric}"])
        assert row[f"gateway_{metric}"]["n"] == 20
        assert row[f"added_{metric}"]["p50"] == pytest.approx(
            row[f"gateway_{metric}"]["p50"] - row[f"direct_{metric}"]["p50"], abs=1e-3)
    # 15 words then <|im_end|>: one text delta per word reaches the client.
    assert row["gateway_tokens_mean"] == 15


def test_steady_paces_every_token_and_reports_the_first_and_last_window(results):
    row = results["sections"]["steady"]["data"]
    tokens = int(2 * 1000 / 12.8)  # smoke: 2 s of engine steps
    assert (row["streams"], row["offered_tokens_per_s"]) == (4, 312)  # 4 × 1000 / 12.8, rounded
    assert row["gateway_token_latency_ms"]["all"]["n"] == 4 * tokens  # every text token of every stream
    assert row["direct_token_latency_ms"]["all"]["n"] == 4 * (tokens + 1)  # + the stop token
    for window in ("first", "last"):
        assert 0 < row["gateway_token_latency_ms"][window]["n"] < 4 * tokens
    assert row["gateway_cpu_us_per_token"] > 0
    assert row["gateway_user_us_per_token"] > 0 and row["gateway_sys_us_per_token"] >= 0
    assert abs(row["gateway_user_us_per_token"] + row["gateway_sys_us_per_token"]
               - row["gateway_cpu_us_per_token"]) <= 0.2


def test_relay_delivers_every_token_of_every_stream(results):
    rows = results["sections"]["relay"]["data"]
    assert [(r["format"], r["streams"]) for r in rows] == [("qwen", 1), ("qwen", 4), ("harmony", 1), ("harmony", 4)]
    for row in rows:
        # paced run: one delay per text token of every stream, through the gateway and direct (+ the stop token)
        assert row["gateway_token_latency_ms"]["n"] == row["streams"] * 20
        header = 3 if row["format"] == "harmony" else 0
        assert row["direct_token_latency_ms"]["n"] == row["streams"] * (20 + header + 1)
        assert row["gateway_tokens_per_s"] > 0 and row["direct_tokens_per_s"] > 0


def test_memory_counts_open_sockets_and_compact_sessions(results):
    memory = results["sections"]["memory"]["data"]
    assert [r["client_compression"] for r in memory["websockets"]] == ["none", "deflate"]
    assert all(r["open"] == r["connections"] == 20 for r in memory["websockets"])
    sessions = memory["sessions"]
    ids_kb = sessions["prompt_tokens"] * 4 / 1024
    # int32 token ids plus item digests: far from a list of Python ints (≥ 8 bytes per pointer alone)
    assert ids_kb <= sessions["retained_per_session_kb"] < ids_kb * 1.5


def test_soak_reports_outcomes_chains_and_growth(tmp_path):
    """`python -m bench.soak --quick` (10 s of mixed load with faults): the report's shape, and
    what holds at any speed — every outcome explained by an injected fault, no broken chain."""
    out = tmp_path / "soak.json"
    command = [sys.executable, "-m", "bench.soak", "--quick", "--concurrency", "4", "--out", str(out)]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report) >= {"requests", "outcomes", "unexpected_errors", "continuations_checked", "broken_chains",
                           "rss_kb", "open_files", "rss_kb_per_1000_requests", "open_files_per_1000_requests",
                           "close_wait_sockets"}
    assert report["requests"] == sum(report["outcomes"].values()) > 0
    assert set(report["outcomes"]) <= {"ok", "client_left", "upstream_dropped", "bad_body_400"}, report["outcomes"]
    assert report["unexpected_errors"] == 0 and report["broken_chains"] == 0
    assert report["continuations_checked"] > 0 and report["continuations_unrecorded"] == 0
    assert report["close_wait_sockets"] == 0
    # idle connections the pool keeps for reuse, at most about one per client: none stranded
    assert report["sockets_after"]["to_replica"].get("ESTABLISHED", 0) <= 2 * 4


def test_hotpath_writes_one_delta_event_per_token():
    """`python -m bench.hotpath`: each stream's every read becomes one client write, and the last
    one is the last word's Responses delta (the words cycle through the bench sentence)."""
    from bench.models import SENTENCE

    command = [sys.executable, "-m", "bench.hotpath", "--streams", "4", "--tokens", "280", "--rounds", "1"]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    words = SENTENCE.split(" ")[1:]
    assert result["tokens"] == result["client_writes"] == 280  # 70 engine steps × 4 streams
    assert result["last_event"] == "response.output_text.delta"
    assert result["last_delta"] == " " + words[(70 - 1) % len(words)]


def test_state_sizing_counts_every_key_of_each_kind_of_state():
    import asyncio

    from bench.state_sizing import measure
    from tests.support.redis_server import RedisServer

    with RedisServer() as server:
        sizes = asyncio.run(measure(server.url))
    assert [sizes[name]["keys"] for name in sizes] == [2, 2, 2, 2, 1, 5]  # header + log; a hash; five logs
    at_once, grown = sizes["session_128k_at_once"], sizes["session_128k_grown"]
    assert at_once["bytes"] >= 4 * at_once["tokens"]  # int32 ids, nothing smaller
    assert grown["bytes"] > at_once["bytes"]  # an appended log carries Redis's slack
    assert sizes["rollout_32_calls"]["bytes"] >= 64_000 * 5 + 32_000 * 8  # tokens, mask, logprobs at least
