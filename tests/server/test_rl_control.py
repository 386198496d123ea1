"""The fleet's control plane against scripted replicas (tests/support/control_replica.py): the
flag and the admin key, the fan-out in vLLM's shapes, vLLM's own `HTTPVLLMWeightSyncClient`
driving the weight-transfer choreography through the gateway (update_weights blocking like
NCCL), and the faults: a replica failing a step, a pause that times out, the barrier's bound.

The real-vLLM half (a real weight change, versions on tokens) is tests/real_vllm/test_rl_control.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from gateway.core.settings import Settings
from gateway.ops.vllm_process import VLLMError, vllm_python
from gateway.pipeline.runtime import Runtime
from gateway.server.app import build_runtime
from tests.support.control_replica import Collective, ControlReplica
from tests.support.fake_vllm import Script
from tests.support.gateway_server import running_gateway
from tests.support.waiting import wait_for

ADMIN, TENANT = "admin-key-0123456789", "tenant-key-0123456789"
AS_ADMIN = {"authorization": f"Bearer {ADMIN}"}


@dataclass
class Fleet:
    url: str
    runtime: Runtime
    replicas: list[ControlReplica]


@contextmanager
def fleet(model_dir, *, world_sizes: tuple[int, ...] = (1, 1), keys: bool = True, **settings) -> Iterator[Fleet]:
    """Scripted replicas of these world sizes behind a gateway with --server-dev-mode (and, with
    `keys`, an admin key and a tenant's)."""
    collective = Collective(len(world_sizes))
    keyring = {"admin_key": ADMIN, "api_keys": [TENANT]} if keys else {}
    with ExitStack() as started:
        replicas = [started.enter_context(ControlReplica(world_size=n, collective=collective)) for n in world_sizes]
        config = Settings(model=str(model_dir), upstreams=[r.url for r in replicas], health_interval=0.2,
                          **{"server_dev_mode": True, **keyring, **settings})
        runtime = build_runtime(config)
        yield Fleet(started.enter_context(running_gateway(config, runtime)), runtime, replicas)


@pytest.fixture
def two(qwen_tokenizer_dir) -> Iterator[Fleet]:
    with fleet(qwen_tokenizer_dir, world_sizes=(2, 1)) as running:
        yield running


def completion(fleet: Fleet) -> httpx.Response:
    return post(fleet, "/v1/completions", {"model": "tiny-qwen3", "prompt": [5, 6], "max_tokens": 3})


def post(fleet: Fleet, path: str, body: dict | None = None, headers: dict | None = AS_ADMIN) -> httpx.Response:
    return httpx.post(fleet.url + path, json=body, headers=headers, timeout=60)


def get(fleet: Fleet, path: str) -> httpx.Response:
    return httpx.get(fleet.url + path, headers=AS_ADMIN, timeout=60)


def test_the_control_endpoints_are_off_without_the_flag(qwen_tokenizer_dir):
    with fleet(qwen_tokenizer_dir, server_dev_mode=False) as off:
        for path in ("/pause", "/update_weights", "/collective_rpc"):
            answer = post(off, path, {})
            assert answer.status_code == 404 and answer.json()["error"]["code"] == "control_endpoints_disabled"
        assert get(off, "/weight_info").status_code == 404
        assert [r.calls for r in off.replicas] == [[], []]


def test_a_tenant_key_is_refused_before_any_replica_is_touched(two):
    for path in ("/pause?mode=keep", "/update_weights", "/init_weight_transfer_engine", "/reset_prefix_cache"):
        answer = post(two, path, {}, headers={"authorization": f"Bearer {TENANT}"})
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "admin_key_required"
    assert post(two, "/pause", headers=None).status_code == 401  # no key at all
    assert [r.calls for r in two.replicas] == [[], []]


def test_pause_and_resume_go_to_every_replica_and_is_paused_needs_all(two):
    a, b = two.replicas
    assert post(two, "/pause?mode=keep&clear_cache=false").json() == {"status": "paused"}
    assert [r.calls for r in two.replicas] == [[("/pause", "mode=keep&clear_cache=false", None)]] * 2
    assert get(two, "/is_paused").json() == {"is_paused": True}
    b.paused = False
    assert get(two, "/is_paused").json() == {"is_paused": False}
    assert post(two, "/resume").json() == {"status": "resumed"}
    assert (a.paused, b.paused) == (False, False)
    assert post(two, "/pause?mode=later").status_code == 400


@pytest.fixture
def open_two(qwen_tokenizer_dir) -> Iterator[Fleet]:
    """As `two`, without keys (vLLM's client sends none, as to a vLLM server without --api-key)."""
    with fleet(qwen_tokenizer_dir, world_sizes=(2, 1), keys=False) as running:
        yield running


def test_vllms_own_weight_sync_client_drives_every_replica_at_once(open_two):
    """vLLM's HTTPVLLMWeightSyncClient (vllm/distributed/weight_transfer/clients.py 58-96) pointed
    at the gateway: init with the NCCL rank offset, start, update (blocking like NCCL until every
    replica joined), finish with the version."""
    two = open_two
    trainer = f"""
from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
import requests
client = HTTPVLLMWeightSyncClient({two.url!r}, timeout=60)
size = requests.get({two.url!r} + "/get_world_size").json()
client.init_weight_transfer_engine({{"master_address": "127.0.0.1", "master_port": 29555,
                                     "rank_offset": 1, "world_size": 1 + size["world_size"]}})
client.start_weight_update()
client.update_weights({{"names": ["w"], "dtype_names": ["bfloat16"], "shapes": [[4, 4]], "packed": False}})
client.finish_weight_update("step-1")
print(size["world_size"])
"""
    try:
        python = vllm_python()
    except VLLMError as exc:
        pytest.fail(str(exc))
    done = subprocess.run([str(python), "-c", trainer], check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["3"]  # 2 + 1: the fleet's ranks
    a, b = two.replicas
    inits = [body["init_info"] for r in (a, b) for path, _, body in r.calls if path == "/init_weight_transfer_engine"]
    assert [i["rank_offset"] for i in inits] == [1, 3]  # replica b's ranks follow replica a's two
    assert all(i["world_size"] == 4 and i["master_port"] == 29555 for i in inits)
    for replica in (a, b):
        assert [p for p in replica.paths() if p != "/get_world_size"] == [
            "/init_weight_transfer_engine", "/start_weight_update", "/update_weights", "/finish_weight_update"]
    assert get(two, "/weight_info").json() == {"weight_version": "step-1"}
    assert get(two, "/get_world_size").json() == {"world_size": 3}


def test_a_world_size_that_is_not_the_fleets_is_refused_before_any_init(two):
    answer = post(two, "/init_weight_transfer_engine",
                  {"init_info": {"master_address": "h", "master_port": 1, "rank_offset": 1, "world_size": 3}})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "world_size_mismatch"
    assert "rank_offset 1 plus the fleet's 3 inference ranks" in answer.json()["error"]["message"]
    assert not any(p == "/init_weight_transfer_engine" for r in two.replicas for p in r.paths())


def test_a_replica_that_fails_an_update_is_out_of_routing_until_it_is_at_the_fleets_version(two):
    a, b = two.replicas
    b.collective = a.collective = None  # no rendezvous: b fails on its own
    b.fail["/update_weights"] = 500
    post(two, "/pause")
    assert post(two, "/start_weight_update").status_code == 200
    failed = post(two, "/update_weights", {"update_info": {"names": []}})
    assert failed.status_code == 502 and failed.json()["error"]["code"] == "fleet_partial_failure"
    assert b.url in failed.json()["error"]["message"] and a.url not in failed.json()["error"]["message"]
    post(two, "/finish_weight_update", {"weight_version": "step-1"})
    post(two, "/resume")
    health = httpx.get(two.url + "/health").json()["replicas"]
    assert [r["fenced"] is None for r in health] == [True, False]
    for _ in range(4):  # every generation goes to the replica with the whole update
        a.queue(Script([1, 2, 3]))
        assert completion(two).status_code == 200
    assert len(b.bodies("/v1/completions")) == 0 and len(a.bodies("/v1/completions")) == 4
    assert get(two, "/weight_info").json() == {"weight_version": "step-1"}  # its label moved, its weights did not

    del b.fail["/update_weights"]  # the next update reaches it whole
    for path, body in (("/pause", None), ("/start_weight_update", None), ("/update_weights", {"update_info": {}}),
                       ("/finish_weight_update", {"weight_version": "step-2"}), ("/resume", None)):
        assert post(two, path, body).status_code == 200, path
    assert [r["fenced"] for r in httpx.get(two.url + "/health").json()["replicas"]] == [None, None]


def test_a_pause_that_times_out_names_the_replica_and_keeps_new_generations_waiting(qwen_tokenizer_dir):
    with fleet(qwen_tokenizer_dir, control_timeout=1.0, update_barrier_timeout=0.5) as slow:
        a, b = slow.replicas
        b.hold["/pause"] = released = threading.Event()
        try:
            answer = post(slow, "/pause?mode=wait")
        finally:
            released.set()
        assert answer.status_code == 504 and answer.json()["error"]["code"] == "fleet_timeout"
        assert b.url in answer.json()["error"]["message"]
        held = completion(slow)
        assert held.status_code == 503 and held.json()["error"]["code"] == "fleet_paused"
        assert held.headers["retry-after"] == "1"
        assert post(slow, "/resume").status_code == 200
        a.queue(Script([1, 2, 3]))
        b.queue(Script([1, 2, 3]))
        assert completion(slow).status_code == 200


def test_a_reset_clears_the_index_of_the_replicas_it_reset(two):
    views = two.runtime.pool.router.views
    a, _ = two.replicas
    for _ in range(2):
        a.queue(Script([1]))
        two.replicas[1].queue(Script([1]))
        post(two, "/v1/completions", {"model": "tiny-qwen3", "prompt": list(range(100, 164)), "max_tokens": 1})
    assert sum(len(view.sent) for view in views.values()) > 0
    assert post(two, "/reset_prefix_cache").json() == {"success": True}
    assert [len(view.sent) for view in views.values()] == [0, 0]
    assert post(two, "/collective_rpc", {"method": "reload_weights"}).json() == {"results": [None, None, None]}


def indexed(fleet: Fleet) -> list[int]:
    """The blocks the router's index counts on, per replica."""
    return [len(view.sent) for view in fleet.runtime.pool.router.views.values()]


def fill_index(fleet: Fleet) -> None:
    for _ in range(2):
        for replica in fleet.replicas:
            replica.queue(Script([1]))
        post(fleet, "/v1/completions", {"model": "tiny-qwen3", "prompt": list(range(100, 164)), "max_tokens": 1})
    assert sum(indexed(fleet)) > 0


# Weight calls as trainers send them: vLLM's endpoint, its worker's methods through /collective_rpc, SkyRL's
# worker extensions (new_inference_worker_wrap.py, vllm_worker.py), TRL's and open-instruct's.
WEIGHT_CALLS = [("/update_weights", {"update_info": {"names": ["w"]}}),
                ("/collective_rpc", {"method": "reload_weights"}),
                ("/collective_rpc", {"method": "update_weights", "kwargs": {"update_info": {"names": ["w"]}}}),
                ("/collective_rpc", {"method": "update_weights_nccl", "kwargs": {"update_info": {"names": ["w"]}}}),
                ("/collective_rpc", {"method": "update_weights_ipc", "kwargs": {"update_info": {"names": ["w"]}}}),
                ("/collective_rpc", {"method": "skyrl_finish_weight_update"}),
                ("/collective_rpc", {"method": "load_weights", "args": ["<pickled request>"]}),
                ("/collective_rpc", {"method": "update_named_param", "args": ["w", "torch.bfloat16", [4, 4]]}),
                ("/collective_rpc", {"method": "update_weight", "args": ["w", "torch.bfloat16", [4, 4]]})]


@pytest.mark.parametrize(("path", "body"), WEIGHT_CALLS, ids=[body.get("method", path) for path, body in WEIGHT_CALLS])
def test_a_weight_change_clears_the_routers_index_whichever_way_it_comes(two, path, body):
    """The blocks the replicas hold were computed with the weights before: routing stops counting on
    them after a weight change through the endpoint or any worker method that changes weights."""
    fill_index(two)
    assert post(two, path, body).status_code == 200
    assert indexed(two) == [0, 0]


@pytest.mark.parametrize("method", ["test_rpc", "init_weight_update_communicator", "skyrl_start_weight_update"])
def test_an_rpc_that_changes_no_weights_leaves_the_index(two, method):
    fill_index(two)
    before = indexed(two)
    assert post(two, "/collective_rpc", {"method": method}).json() == {"results": [None, None, None]}
    assert indexed(two) == before


@pytest.mark.parametrize("recovery", ["skyrl_start_weight_update", "reload_weights"])
def test_a_replica_failing_a_weight_rpc_is_out_of_routing_until_an_update_starts_or_reloads_it(two, recovery):
    """As with /update_weights: the replica a worker's weight method failed on may hold half-loaded
    weights, so it serves nothing until a new update starts on it (then it is at the fleet's version
    again) or it reloads its whole checkpoint; an RPC that touches no weights changes nothing."""
    a, b = two.replicas
    a.collective = b.collective = None  # no rendezvous: b fails alone
    b.fail["/collective_rpc"] = 500
    failed = post(two, "/collective_rpc", {"method": "update_weights_ipc", "kwargs": {"update_info": {}}})
    assert failed.status_code == 502 and failed.json()["error"]["code"] == "fleet_partial_failure"
    assert b.url in failed.json()["error"]["message"] and a.url not in failed.json()["error"]["message"]
    assert [r["fenced"] is None for r in httpx.get(two.url + "/health").json()["replicas"]] == [True, False]
    for _ in range(3):
        a.queue(Script([1, 2, 3]))
        assert completion(two).status_code == 200
    assert len(b.bodies("/v1/completions")) == 0 and len(a.bodies("/v1/completions")) == 3
    del b.fail["/collective_rpc"]
    assert post(two, "/collective_rpc", {"method": "test_rpc"}).status_code == 200
    assert [r["fenced"] is None for r in httpx.get(two.url + "/health").json()["replicas"]] == [True, False]
    assert post(two, "/collective_rpc", {"method": recovery}).status_code == 200
    assert [r["fenced"] for r in httpx.get(two.url + "/health").json()["replicas"]] == [None, None]


def test_trls_async_grpo_calls_drive_the_fleet(open_two):
    """TRL's async GRPO, call for call: trl/experimental/async_grpo/weight_transfer.py
    `init_weight_transfer` (get_world_size, then init_weight_transfer_engine with rank_offset 1 and
    world_size + 1 posted from a thread while the trainer joins), `pause`/`resume` (mode=keep),
    vllm_client.py `get_dtype` (/server_info?config_format=json), `start_weight_update`
    ({"is_checkpoint_format": true}), `send_weights` (update_weights from a thread),
    `finish_weight_update` (no body)."""
    two = open_two
    size = httpx.get(two.url + "/get_world_size").json()["world_size"]
    init_info = {"master_address": "10.0.0.1", "master_port": 40123, "rank_offset": 1, "world_size": size + 1}
    init = threading.Thread(target=post, args=(two, "/init_weight_transfer_engine", {"init_info": init_info}, None))
    init.start()
    init.join(60)
    dtype = httpx.get(two.url + "/server_info", params={"config_format": "json"}).json()
    assert dtype["vllm_config"]["model_config"]["dtype"] == "torch.bfloat16"
    for path, body in (("/pause?mode=keep", None), ("/start_weight_update", {"is_checkpoint_format": True}),
                       ("/update_weights", {"update_info": {"names": ["w"], "packed": True}}),
                       ("/finish_weight_update", None), ("/resume", None)):
        answer = post(two, path, body, headers=None)
        assert answer.status_code == 200, (path, answer.text)
    a, b = two.replicas
    for replica, offset in ((a, 1), (b, 3)):
        calls = [(path, query, body) for path, query, body in replica.calls if path != "/get_world_size"]
        assert calls == [
            ("/init_weight_transfer_engine", "", {"init_info": {**init_info, "rank_offset": offset}}),
            ("/server_info", "config_format=json", None), ("/pause", "mode=keep", None),
            ("/start_weight_update", "", {"is_checkpoint_format": True}),
            ("/update_weights", "", {"update_info": {"names": ["w"], "packed": True}}),
            ("/finish_weight_update", "", None), ("/resume", "", None)]
    assert httpx.get(two.url + "/weight_info").json() == {"weight_version": "default"}  # TRL labels nothing


SKYRL = "NovaSky-AI/SkyRL a9564572 skyrl/backends/skyrl_train/inference_servers/remote_inference_client.py"


def skyrl_call(fleet: Fleet, method: str, path: str, *, json: dict | None = None, params: dict | None = None,
               headers: dict | None = None) -> dict | None:
    """SkyRL's `_call_server` (lines 933-959): the body is read only when the answer has a
    Content-Length, as JSON (aiohttp's `resp.json()` refuses any other content type)."""
    response = httpx.request(method, fleet.url + path, json=json, params=params, headers=headers, timeout=60)
    assert response.status_code == 200, (path, response.text)
    if not response.headers.get("content-length") or response.headers["content-length"] == "0":
        return None
    assert response.headers["content-type"].startswith("application/json"), (path, response.headers)
    return response.json()


def test_skyrls_remote_inference_client_drives_the_fleet_as_one_server(open_two):
    """SkyRL's `RemoteInferenceClient` with `proxy_url` and `server_urls: [GATEWAY]`, call for call
    (SKYRL, line numbers): `get_world_size` (1358-1400: GET with a `{}` body; one server, so its
    world size is the fleet's), `init_weight_update_communicator` (1105-1132, with
    broadcast_strategy.py's `BroadcastInitInfo.for_servers`/`to_api_payload`: rank_offset 1,
    world_size + 1, `packed`), `pause` (985-1009: mode=keep, clear_cache=false), the NCCL update
    through its worker extension (`start_weight_update` 1176-1200, `update_weights_nccl`
    1228-1255 — blocking in the collective until every replica joined —, `finish_weight_update`
    1257-1270, each a /collective_rpc), `reset_prefix_cache` (1086-1099: a JSON body, which vLLM
    ignores), `resume` (1011-1013), `_generate_single` (466-530: /inference/v1/generate with
    X-Session-ID, which names the rollout it is recorded in), `detokenize` (862-892)."""
    two = open_two
    a, b = two.replicas
    world = skyrl_call(two, "GET", "/get_world_size", json={})["world_size"]
    assert world == 3  # replica a has 2 ranks, b 1: one "server" of the fleet's size
    payload = {"master_address": "10.0.0.1", "master_port": 40123, "rank_offset": 1, "world_size": world + 1,
               "packed": True}
    init = threading.Thread(target=skyrl_call, args=(two, "POST", "/init_weight_transfer_engine"),
                            kwargs={"json": {"init_info": payload}})
    init.start()
    init.join(60)
    assert not init.is_alive()
    skyrl_call(two, "POST", "/pause", params={"mode": "keep", "clear_cache": "false"})
    update_info = {"names": ["w"], "dtype_names": ["bfloat16"], "shapes": [[4, 4]]}
    rpcs = [{"method": "skyrl_start_weight_update", "kwargs": {"is_checkpoint_format": True}},
            {"method": "update_weights_nccl", "kwargs": {"update_info": update_info}},
            {"method": "skyrl_finish_weight_update"}]
    for rpc in rpcs:
        assert skyrl_call(two, "POST", "/collective_rpc", json=rpc) == {"results": [None, None, None]}
    assert skyrl_call(two, "POST", "/reset_prefix_cache", json={"reset_running_requests": False}) == {"success": True}
    skyrl_call(two, "POST", "/resume")
    for replica, offset in ((a, 1), (b, 3)):
        calls = [(path, query, body) for path, query, body in replica.calls if path != "/get_world_size"]
        assert calls == [
            ("/init_weight_transfer_engine", "", {"init_info": {**payload, "rank_offset": offset}}),
            ("/pause", "mode=keep&clear_cache=false", None), *(("/collective_rpc", "", rpc) for rpc in rpcs),
            ("/reset_prefix_cache", "", None), ("/resume", "", None)]  # the body vLLM ignores is not passed on

    for replica in (a, b):
        replica.queue(Script([9707, 1879, 151645], logprobs=[-0.5, -0.25, -0.125]))
    body = {"sampling_params": {"temperature": 1.0, "max_tokens": 8, "logprobs": 0}, "model": "tiny-qwen3",
            "token_ids": [5, 6, 7]}
    choice = skyrl_call(two, "POST", "/inference/v1/generate", json=body, headers={"X-Session-ID": "traj-1"})
    choice = choice["choices"][0]
    assert (choice["token_ids"], choice["finish_reason"]) == ([9707, 1879, 151645], "stop")
    assert [lp["logprob"] for lp in choice["logprobs"]["content"]] == [-0.5, -0.25, -0.125]
    exported = httpx.get(two.url + "/v1/rollouts/traj-1").json()  # X-Session-ID records SkyRL's trajectory
    assert exported["token_ids"] == [5, 6, 7, 9707, 1879, 151645]
    assert skyrl_call(two, "POST", "/detokenize", json={"model": "tiny-qwen3", "tokens": [9707, 1879]}) == \
        {"prompt": "Hello world"}
    # Its router's /finish_session (894-925) is not vLLM's: a 404, which SkyRL logs and ignores.
    assert httpx.post(two.url + "/finish_session", params={"session_id": "traj-1"}).status_code == 404


def generate(fleet: Fleet, model: str, timeout: float | httpx.Timeout = 60, **extra) -> httpx.Response:
    return httpx.post(fleet.url + "/inference/v1/generate", timeout=timeout, headers=AS_ADMIN,
                      json={"model": model, "token_ids": [5, 6, 7], "sampling_params": {"max_tokens": 3}, **extra})


def test_a_lora_adapter_loads_everywhere_is_listed_and_routes_to_its_holders(two):
    a, b = two.replicas
    b.fail["/v1/load_lora_adapter"] = 500  # b does not take it: only a may serve it
    load = {"lora_name": "policy@step-3", "lora_path": "/ckpt/lora-3"}
    answer = post(two, "/v1/load_lora_adapter", load)
    assert answer.status_code == 502 and b.url in answer.json()["error"]["message"]
    models = httpx.get(two.url + "/v1/models", headers=AS_ADMIN).json()["data"]
    assert [(m["id"], m.get("parent"), m.get("root")) for m in models] == [
        ("tiny-qwen3", None, None), ("policy@step-3", "tiny-qwen3", "/ckpt/lora-3")]
    for _ in range(3):
        a.queue(Script([1, 2, 3]))
        assert generate(two, "policy@step-3").status_code == 200
    assert [body["model"] for body in a.bodies("/inference/v1/generate")] == ["policy@step-3"] * 3
    assert b.bodies("/inference/v1/generate") == []
    unknown = generate(two, "policy@step-9")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert "policy@step-3" in unknown.json()["error"]["message"]


def test_an_in_place_reload_clears_the_index_and_an_unload_waits_for_its_generations(two):
    a, b = two.replicas
    load = {"lora_name": "policy", "lora_path": "/ckpt/lora-1"}
    assert post(two, "/v1/load_lora_adapter", load).text == "Success: LoRA adapter 'policy' added successfully."
    long = list(range(100, 164))
    a.queue(Script([1]))
    b.queue(Script([1]))
    post(two, "/inference/v1/generate", {"model": "policy", "token_ids": long, "sampling_params": {"max_tokens": 1}})
    views = two.runtime.pool.router.views
    assert sum(len(view.sent) for view in views.values()) > 0
    assert post(two, "/v1/load_lora_adapter", {**load, "lora_path": "/ckpt/lora-2", "load_inplace": True}).is_success
    assert [len(view.sent) for view in views.values()] == [0, 0]

    release = threading.Event()
    for replica in (a, b):
        replica.reset()  # the script the first generation left queued on the other replica
        replica.queue(Script([1, 2], headers_until=release))
    stream = threading.Thread(target=generate, args=(two, "policy"), daemon=True)
    stream.start()
    wait_for(lambda: a.bodies("/inference/v1/generate") or b.bodies("/inference/v1/generate"),
             "the generation reached a replica")  # its answer held there
    unloading = threading.Thread(target=post, args=(two, "/v1/unload_lora_adapter", {"lora_name": "policy"}),
                                 daemon=True)
    unloading.start()
    wait_for(lambda: "policy" in two.runtime.pool.retiring, "the unload began")
    refused = generate(two, "policy")
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found"
    assert not any(p == "/v1/unload_lora_adapter" for r in (a, b) for p in r.paths())  # still in use
    release.set()
    stream.join(60)
    unloading.join(60)
    assert [r.loras for r in (a, b)] == [{}, {}]
    assert [m["id"] for m in httpx.get(two.url + "/v1/models", headers=AS_ADMIN).json()["data"]] == ["tiny-qwen3"]


UPDATE = (("/pause", None), ("/init_weight_transfer_engine", {"init_info": {"master_address": "h", "master_port": 1}}),
          ("/start_weight_update", None), ("/update_weights", {"update_info": {"names": ["w"]}}),
          ("/finish_weight_update", {"weight_version": "step-1"}), ("/update_weight_version", {"new_version": "step-1-final"}),
          ("/resume", None))
# The steps after which the replica that failed one is out of routing: its weights or its version are not the
# fleet's, or it did not resume. A failed pause or init left its weights as they were.
FENCING = {"/start_weight_update", "/update_weights", "/finish_weight_update", "/update_weight_version", "/resume"}


@pytest.mark.parametrize("failing", [path for path, _ in UPDATE] + ["down"])
def test_a_replica_failing_at_any_step_is_named_and_fenced_when_its_weights_may_differ(two, failing):
    a, b = two.replicas
    a.collective = b.collective = None  # no rendezvous: b fails alone
    for path, body in UPDATE:
        if failing == "down" and path == "/update_weights":
            b.__exit__(None, None, None)  # the replica's server is gone mid-update
        elif path == failing:
            b.fail[path] = 500
        answer = post(two, path, body)
        if path == failing or (failing == "down" and path in ("/update_weights", "/finish_weight_update",
                                                              "/update_weight_version", "/resume")):
            assert answer.status_code == 502, (path, answer.text)
            error = answer.json()["error"]
            assert error["code"] == "fleet_partial_failure" and b.url in error["message"]
            assert a.url not in error["message"]
        else:
            assert answer.status_code == 200, (path, answer.text)
    fenced = [r["fenced"] for r in httpx.get(two.url + "/health").json()["replicas"]]
    assert fenced[0] is None
    assert (fenced[1] is not None) == (failing in FENCING or failing == "down")
    assert not two.runtime.pool.barrier.closed  # the resume opened it for the replicas that resumed


def test_an_abort_by_id_goes_to_the_replica_holding_it_and_an_empty_one_everywhere(two):
    a, b = two.replicas
    for replica in (a, b):
        replica.queue(Script([1, 2], chunks=[1, 1], stall_after=1))  # open until its client leaves

    def streaming() -> None:  # the client leaves 20 s after the stall began: the stream's whole lifetime here
        with contextlib.suppress(httpx.ReadTimeout):
            generate(two, "tiny-qwen3", stream=True, timeout=httpx.Timeout(60, read=20))
    stream = threading.Thread(target=streaming, daemon=True)
    stream.start()
    wait_for(lambda: any(r.streams for r in two.runtime.pool.replicas), "the stream is open on a replica")
    holder = next(r for r in two.runtime.pool.replicas if r.streams)
    request_id = next(iter(holder.streams)).request_id
    held, other = (a, b) if holder.url == a.url else (b, a)
    answer = post(two, "/inference/v1/abort_requests", {"request_ids": [f"generate-tokens-{request_id}"]})
    assert answer.status_code == 200 and answer.json() == {"status": "aborted", "aborted": 1}
    assert held.aborted == [f"generate-tokens-{request_id}"] and other.aborted == []
    assert post(two, "/abort_requests", {"request_ids": []}).json() == {"status": "aborted", "aborted": 2}
    assert [p for p in a.paths() + b.paths() if p == "/abort_requests"] == ["/abort_requests"] * 2
    stream.join(60)


def test_salting_by_weight_version_keeps_each_version_to_its_own_blocks(qwen_tokenizer_dir):
    with fleet(qwen_tokenizer_dir, keys=False, cache_salt_by_weight_version=True) as salted:
        a, b = salted.replicas
        assert post(salted, "/update_weight_version", {"new_version": "step-7"}).status_code == 200
        for replica in (a, b):
            replica.queue(*[Script([1, 2])] * 3)
        assert generate(salted, "tiny-qwen3").status_code == 200
        assert generate(salted, "tiny-qwen3", cache_salt="tenant-a").status_code == 200  # the client's own stays
        chat = httpx.post(salted.url + "/v1/chat/completions", timeout=60, json={
            "model": "tiny-qwen3", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert chat.status_code == 200, chat.text
        sent = a.bodies("/inference/v1/generate") + b.bodies("/inference/v1/generate")
        assert sorted(body.get("cache_salt") for body in sent) == ["step-7", "step-7", "tenant-a"]


def test_chat_answers_name_the_weights_of_their_tokens_as_vllm_does(open_two):
    two = open_two
    assert post(two, "/update_weight_version", {"new_version": "step-3"}, headers=None).status_code == 200
    for replica in two.replicas:
        replica.queue(Script([9707, 0, 151645]), Script([9707, 0, 151645]))
    request = {"model": "tiny-qwen3", "messages": [{"role": "user", "content": "hi"}], "return_token_ids": True}
    answer = httpx.post(two.url + "/v1/chat/completions", json=request, timeout=60).json()
    assert answer["choices"][0]["weight_versions"] == [{"version": "step-3", "start": 0, "end": 3}]
    streamed = httpx.post(two.url + "/v1/chat/completions", json={**request, "stream": True}, timeout=60).text
    chunks = [orjson.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: {")]
    assert [c["choices"][0]["weight_versions"] for c in chunks if "weight_versions" in c["choices"][0]] == [
        [{"version": "step-3", "start": 0, "end": 3}]]  # the last chunk only


def test_the_routers_prefix_keys_hold_the_adapters_name_as_vllms_block_hashes_do(open_two):
    two = open_two
    assert post(two, "/v1/load_lora_adapter", {"lora_name": "policy", "lora_path": "/ckpt/p"}, None).is_success
    router, prompt = two.runtime.pool.router, list(range(100, 164))  # four 16-token chunks

    def held_by_any(model: str) -> int:
        """The most of the prompt any replica held when it was routed (the chosen one may be
        another, for load: what it held says nothing of the keys)."""
        for replica in two.replicas:
            replica.queue(Script([1]))
        assert generate(two, model, token_ids=prompt).status_code == 200
        return router.last.best
    assert held_by_any("policy") == 0  # nothing cached yet
    assert held_by_any("tiny-qwen3") == 0  # the same ids without the adapter: other blocks
    assert held_by_any("policy") == 64  # the adapter's own blocks


RENDERED = {  # path → a request in that API's shape, and where its answer names the model
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
    "/v1/responses": {"input": "hi", "max_output_tokens": 8},
    "/v1/messages": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
}


async def _over_websocket(fleet: Fleet, model: str) -> list[dict]:
    """A Responses `response.create` over WebSocket; its events to the end."""
    url = fleet.url.replace("http://", "ws://") + "/v1/responses"
    async with connect(url, additional_headers=AS_ADMIN) as ws:
        await ws.send(orjson.dumps({"type": "response.create", "model": model, **RENDERED["/v1/responses"]}).decode())
        events = [orjson.loads(await ws.recv())]
        while events[-1]["type"] not in ("response.completed", "response.failed", "error"):
            events.append(orjson.loads(await ws.recv()))
        return events


def test_an_adapter_on_the_rendered_apis_goes_to_its_holders_as_its_own_model(two):
    """`model=<adapter>` on Chat Completions, Responses (HTTP and WebSocket) and Messages: the base
    model's render, sent only to the replica holding it under the adapter's name, answered as it."""
    a, b = two.replicas
    b.fail["/v1/load_lora_adapter"] = 500  # only a holds it
    assert post(two, "/v1/load_lora_adapter", {"lora_name": "policy@step-3", "lora_path": "/ckpt/l"}).status_code == 502
    base_prompts = {}
    for path, request in RENDERED.items():  # the base model's render of each, wherever it went
        for replica in (a, b):
            replica.reset()
            replica.queue(Script([9707, 151645]))
        assert post(two, path, {"model": "tiny-qwen3", **request}).status_code == 200
        base_prompts[path] = [body["token_ids"] for r in (a, b) for body in r.bodies("/inference/v1/generate")]
    for replica in (a, b):
        replica.reset()
    echoed = {}
    for path, request in RENDERED.items():
        a.queue(Script([9707, 151645]))
        answer = post(two, path, {"model": "policy@step-3", **request})
        assert answer.status_code == 200, answer.text
        echoed[path] = answer.json()["model"]
    a.queue(Script([9707, 151645]))
    events = asyncio.run(_over_websocket(two, "policy@step-3"))
    assert events[-1]["type"] == "response.completed" and events[-1]["response"]["model"] == "policy@step-3"
    assert echoed == dict.fromkeys(RENDERED, "policy@step-3")
    sent = a.bodies("/inference/v1/generate")
    assert [body["model"] for body in sent] == ["policy@step-3"] * 4
    assert [body["token_ids"] for body in sent] == [*(p for ps in base_prompts.values() for p in ps),
                                                    base_prompts["/v1/responses"][0]]
    assert b.bodies("/inference/v1/generate") == []
    for path, request in RENDERED.items():
        unknown = post(two, path, {"model": "policy@step-9", **request})
        assert unknown.status_code == 404, path
        error = unknown.json()["error"]
        assert error.get("code", error.get("type")) in ("model_not_found", "not_found_error"), error
        assert "policy@step-3" in error["message"]
    assert a.bodies("/inference/v1/generate") == sent  # nothing more was sent
    assert sum(two.runtime.pool.adapter_users.values()) == 0  # every turn let go of the adapter


def test_tokenize_and_detokenize_take_a_loaded_adapters_name_as_vllm_does(two):
    """vLLM's /tokenize and /detokenize accept a LoRA adapter's name as `model` and answer with the
    base model's tokenizer (an adapter has no tokenizer of its own): so does the gateway, for text
    (a replica tokenizes it under the base model's name), a conversation and ids; a name that is
    neither the base model nor a loaded adapter is still 404."""
    assert post(two, "/v1/load_lora_adapter", {"lora_name": "policy@step-3", "lora_path": "/ckpt/l"}).is_success
    messages = [{"role": "user", "content": "hi"}]
    bodies = {"/tokenize": [{"prompt": "Hello world"}, {"messages": messages}], "/detokenize": [{"tokens": [9707, 1879]}]}
    for path, cases in bodies.items():
        for body in cases:
            base = post(two, path, {"model": "tiny-qwen3", **body})
            adapter = post(two, path, {"model": "policy@step-3", **body})
            assert base.status_code == adapter.status_code == 200, adapter.text
            assert adapter.json() == base.json(), (path, body)
            unknown = post(two, path, {"model": "policy@step-9", **body})
            assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
            assert "policy@step-3" in unknown.json()["error"]["message"]
    assert post(two, "/detokenize", {"model": "policy@step-3", "tokens": [9707, 1879]}).json() == \
        {"prompt": "Hello world"}
    sent = [body for replica in two.replicas for body in replica.bodies("/tokenize")]
    assert [body["model"] for body in sent] == ["tiny-qwen3", "tiny-qwen3"]  # the base model's tokenizer


def _sse(text: str) -> list[dict]:
    return [orjson.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def test_responses_and_messages_answers_name_the_weights_of_their_tokens(open_two):
    """As Chat's: with `return_token_ids`, `weight_versions` beside the ids — on the response
    (streamed: `response.completed`) and on the message (streamed: `message_delta`)."""
    two = open_two
    assert post(two, "/update_weight_version", {"new_version": "step-3"}, headers=None).status_code == 200
    spans = [{"version": "step-3", "start": 0, "end": 3}]

    def answers(path: str, request: dict) -> tuple[dict, list[dict]]:
        for replica in two.replicas:
            replica.reset()
            replica.queue(Script([9707, 0, 151645]), Script([9707, 0, 151645]))
        whole = post(two, path, request, headers=None)
        streamed = post(two, path, {**request, "stream": True}, headers=None)
        assert whole.status_code == streamed.status_code == 200, (whole.text, streamed.text)
        return whole.json(), _sse(streamed.text)

    response, events = answers("/v1/responses", {"model": "tiny-qwen3", "input": "hi", "return_token_ids": True})
    assert (response["output_token_ids"], response["weight_versions"]) == ([9707, 0, 151645], spans)
    assert [(e["type"], e["response"]["weight_versions"]) for e in events if "weight_versions" in e.get("response", {})
            ] == [("response.completed", spans)]  # the final event only
    request = {"model": "tiny-qwen3", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    message, events = answers("/v1/messages", {**request, "return_token_ids": True})
    assert (message["output_token_ids"], message["weight_versions"]) == ([9707, 0, 151645], spans)
    sent = [body["token_ids"] for replica in two.replicas for body in replica.bodies("/inference/v1/generate")]
    assert len(sent) == 2 and message["prompt_token_ids"] == sent[0] == sent[1]
    assert [(e["type"], e["weight_versions"]) for e in events if "weight_versions" in e] == [("message_delta", spans)]
    plain, events = answers("/v1/messages", request)
    assert "weight_versions" not in plain and not any("weight_versions" in e for e in events)


def test_a_rendered_turn_naming_an_adapter_is_keyed_by_its_name_in_the_routers_index(open_two):
    two = open_two
    assert post(two, "/v1/load_lora_adapter", {"lora_name": "policy", "lora_path": "/ckpt/p"}, None).is_success
    router = two.runtime.pool.router
    request = {"messages": [{"role": "user", "content": "count the words " * 20}], "max_tokens": 8}

    def held_by_any(model: str) -> int:
        for replica in two.replicas:
            replica.queue(Script([9707, 151645]))
        assert post(two, "/v1/chat/completions", {"model": model, **request}, None).status_code == 200
        return router.last.best
    assert held_by_any("policy") == 0  # nothing cached yet
    assert held_by_any("tiny-qwen3") == 0  # the same render without the adapter: other blocks
    assert held_by_any("policy") >= 48  # the adapter's own blocks (whole 16-token chunks)
