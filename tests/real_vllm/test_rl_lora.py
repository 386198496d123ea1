"""LoRA adapters through the gateway against two real vLLM-CPU replicas (`--enable-lora`,
`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`, adapters written by hand as PEFT saves them): a load
fans out, `/v1/models` lists it as vLLM does, `model=<adapter>` generates with it (greedy output
differs from the base model's), a versioned name loads beside it, an in-place reload clears the
router's index, an unload empties the listing and the name is then refused.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest

from gateway.core.settings import Settings
from gateway.ops.vllm_process import VLLMError, VLLMProcess
from gateway.pipeline.runtime import Runtime
from gateway.server.app import build_runtime
from tests.support.gateway_server import running_gateway
from tests.support.rl_weights import lora_adapter

pytestmark = pytest.mark.vllm

MODEL = "tiny-qwen3"
PROMPT = [785, 6722, 315, 9625, 374, 12095, 13, 576] * 20  # 160 ids: past one 128-token CPU block


@pytest.fixture(scope="module")
def stack(qwen_model_dir, tmp_path_factory) -> Iterator[tuple[str, Runtime]]:
    logs = tmp_path_factory.mktemp("lora-vllm")
    cpus = sorted(os.sched_getaffinity(0))
    replicas = [VLLMProcess(qwen_model_dir, served_model_name=MODEL, max_model_len=2048, enforce_eager=True,
                            cpus=str(cpu), log_path=logs / f"vllm-{name}.log",
                            extra_args=("--enable-lora", "--max-lora-rank", "8", "--max-loras", "2"),
                            env={"VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"})
                for name, cpu in (("a", cpus[0]), ("b", cpus[-1]))]
    try:
        for process in replicas:
            process.start()
        for process in replicas:
            process.wait_ready_sync(timeout=900)
        settings = Settings(model=str(qwen_model_dir), upstreams=[r.url for r in replicas], health_interval=0.5,
                            server_dev_mode=True)
        runtime = build_runtime(settings)
        with running_gateway(settings, runtime) as url:
            yield url, runtime
    except VLLMError as exc:
        pytest.fail(str(exc))
    finally:
        for process in replicas:
            process.stop()


def post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=300)


def greedy(url: str, model: str) -> httpx.Response:
    return post(url, "/inference/v1/generate", {"model": model, "token_ids": PROMPT,
                                                "sampling_params": {"temperature": 0.0, "max_tokens": 8}})


def test_adapters_load_route_reload_and_unload_across_the_fleet(stack, qwen_model_dir, tmp_path):
    url, runtime = stack
    first, second = (lora_adapter(qwen_model_dir, tmp_path / name, seed) for name, seed in (("v1", 1), ("v2", 2)))
    loaded = post(url, "/v1/load_lora_adapter", {"lora_name": "policy", "lora_path": str(first)})
    assert loaded.status_code == 200 and loaded.text == "Success: LoRA adapter 'policy' added successfully."
    assert [sorted(r.adapters) for r in runtime.pool.replicas] == [["policy"], ["policy"]]
    listed = httpx.get(url + "/v1/models").json()["data"]
    assert [(m["id"], m.get("parent"), m.get("root")) for m in listed] == [
        (MODEL, None, None), ("policy", MODEL, str(first))]

    base, adapted = greedy(url, MODEL).json(), greedy(url, "policy").json()
    assert adapted["model"] == "policy"
    assert adapted["choices"][0]["token_ids"] != base["choices"][0]["token_ids"]
    assert greedy(url, "policy").json()["choices"][0]["token_ids"] == adapted["choices"][0]["token_ids"]

    assert post(url, "/v1/load_lora_adapter", {"lora_name": "policy@step-2", "lora_path": str(second)}).is_success
    stepped = greedy(url, "policy@step-2").json()["choices"][0]["token_ids"]
    assert stepped != adapted["choices"][0]["token_ids"]

    held = sum(len(view.sent) for view in runtime.pool.router.views.values())
    assert held > 0
    again = post(url, "/v1/load_lora_adapter", {"lora_name": "policy", "lora_path": str(second), "load_inplace": True})
    assert again.status_code == 200, again.text
    assert [len(view.sent) for view in runtime.pool.router.views.values()] == [0, 0]
    assert post(url, "/reset_prefix_cache", {}).json() == {"success": True}  # vLLM's blocks of the old weights
    assert greedy(url, "policy").json()["choices"][0]["token_ids"] == stepped  # the same weights now

    assert post(url, "/v1/unload_lora_adapter", {"lora_name": "policy"}).status_code == 200
    assert [m["id"] for m in httpx.get(url + "/v1/models").json()["data"]] == [MODEL, "policy@step-2"]
    gone = greedy(url, "policy")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found"
