"""The tiny model fixtures, and the fake vLLM server checked against the real one."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from transformers import AutoTokenizer

from gateway.ops.tiny_models import BUILD_SCRIPT
from gateway.ops.vllm_process import VLLMProcess, vllm_python
from gateway.upstream.health import HealthPolicy
from gateway.upstream.pool import Pool
from tests.support.fake_vllm import FakeVLLM, Script

HELLO_WORLD = [9707, 1879]


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_qwen_model_dir(qwen_model_dir: Path) -> None:
    config = read_json(qwen_model_dir / "config.json")
    assert (config["model_type"], config["vocab_size"], config["head_dim"], config["eos_token_id"]) == (
        "qwen3", 151936, 64, 151645)
    assert config["tie_word_embeddings"] is True and config["dtype"] == "bfloat16"
    generation = read_json(qwen_model_dir / "generation_config.json")
    assert {k: generation[k] for k in ("temperature", "top_p", "top_k", "eos_token_id")} == {
        "temperature": 0.7, "top_p": 0.8, "top_k": 20, "eos_token_id": [151645, 151643]}
    tokenizer = AutoTokenizer.from_pretrained(qwen_model_dir)
    assert tokenizer.encode("Hello world") == HELLO_WORLD
    assert tokenizer.convert_tokens_to_ids(["<|im_end|>", "<think>"]) == [151645, 151667]
    assert len(tokenizer) <= config["vocab_size"]
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)
    assert rendered.startswith("<|im_start|>user\nHi<|im_end|>\n")


def test_harmony_model_dir(harmony_model_dir: Path) -> None:
    config = read_json(harmony_model_dir / "config.json")
    assert (config["vocab_size"], config["eos_token_id"], config["max_position_embeddings"]) == (
        201088, 200002, 131072)
    generation = read_json(harmony_model_dir / "generation_config.json")
    assert generation["eos_token_id"] == [200002, 199999, 200012]
    tokenizer = AutoTokenizer.from_pretrained(harmony_model_dir)
    assert len(tokenizer) == 201088
    assert tokenizer.convert_tokens_to_ids(["<|start|>", "<|return|>", "<|call|>"]) == [200006, 200002, 200012]


def test_model_build_is_deterministic(qwen_model_dir: Path, qwen_tokenizer_dir: Path, tmp_path: Path) -> None:
    """Rebuilding with the cached model's recipe gives byte-identical weights."""
    config = read_json(qwen_model_dir / "config.json")
    generation = read_json(qwen_model_dir / "generation_config.json")
    subprocess.run([str(vllm_python()), str(BUILD_SCRIPT), "--out", str(tmp_path), "--tokenizer",
                    str(qwen_tokenizer_dir), "--vocab-size", str(config["vocab_size"]), "--eos-token-id",
                    *map(str, generation["eos_token_id"]), "--max-positions",
                    str(config["max_position_embeddings"])], check=True, capture_output=True)

    def digest(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    assert digest(tmp_path / "model.safetensors") == digest(qwen_model_dir / "model.safetensors")
    assert read_json(tmp_path / "config.json") == config


# --- the fake vLLM server -------------------------------------------------------------------


def shape(value: Any) -> Any:
    """Keys and value types, recursively (a list by its first element; "token_id:N" keys as one)."""
    if isinstance(value, dict):
        return {("token_id:N" if key.startswith("token_id:") else key): shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def shapes(result: Any) -> Any:
    """The shape of a whole answer, or of each event of a stream."""
    return [shape(event) for event in result] if isinstance(result, list) else shape(result)


def sse_events(text: str) -> list[Any]:
    events = []
    for block in text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            data = block[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


@pytest.fixture
def fake() -> Iterator[FakeVLLM]:
    with FakeVLLM(model="tiny-qwen3", max_model_len=32768) as server:
        yield server


REQUESTS = [
    ("/inference/v1/generate", {"token_ids": HELLO_WORLD, "sampling_params": {
        "max_tokens": 3, "temperature": 0, "logprobs": 2, "detokenize": False}, "request_id": "r1", "stream": False}),
    ("/inference/v1/generate", {"token_ids": HELLO_WORLD, "sampling_params": {
        "max_tokens": 3, "temperature": 0, "logprobs": 1}, "request_id": "r2", "stream": True,
        "stream_options": {"include_usage": True}}),
    ("/inference/v1/generate", {"token_ids": HELLO_WORLD, "sampling_params": {"max_tokens": 2, "temperature": 0},
                                "stream": True}),
    ("/v1/completions", {"prompt": HELLO_WORLD, "max_tokens": 3, "temperature": 0, "logprobs": 2,
                         "return_tokens_as_token_ids": True, "return_token_ids": True, "request_id": "c1"}),
    ("/v1/completions", {"prompt": HELLO_WORLD, "max_tokens": 3, "temperature": 0, "logprobs": 1,
                         "return_tokens_as_token_ids": True, "return_token_ids": True, "stream": True,
                         "stream_options": {"include_usage": True}}),
    ("/v1/completions", {"prompt": HELLO_WORLD, "max_tokens": 2, "temperature": 0, "stream": True}),
]


def call(url: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    response = httpx.post(url + path, json={"model": "tiny-qwen3", **body}, timeout=60)
    return response.status_code, sse_events(response.text) if body.get("stream") else response.json()


def as_script(result: Any, max_tokens: int) -> Script:
    """A script reproducing a real answer: its tokens, finish reason and (streamed) chunking."""
    events = [e for e in result if isinstance(e, dict)] if isinstance(result, list) else [result]
    choices = [c for e in events for c in e["choices"]]
    if choices[0]["token_ids"] is None:  # completions without return_token_ids: ids not shown
        return Script([0] * max_tokens, finish_reason=choices[-1]["finish_reason"])
    return Script([t for c in choices for t in c["token_ids"]], finish_reason=choices[-1]["finish_reason"],
                  chunks=[len(c["token_ids"]) for c in choices])


@pytest.mark.vllm
@pytest.mark.parametrize(("path", "body"), REQUESTS, ids=lambda v: v if isinstance(v, str) else "")
def test_fake_answers_like_real_vllm(vllm_qwen: VLLMProcess, fake: FakeVLLM, path: str,
                                     body: dict[str, Any]) -> None:
    status, real = call(vllm_qwen.url, path, body)
    assert status == 200
    max_tokens = body.get("max_tokens") or body["sampling_params"]["max_tokens"]
    script = as_script(real, max_tokens)
    fake.queue(script)
    status, scripted = call(fake.url, path, body)
    assert status == 200
    assert shapes(scripted) == shapes(real)
    assert as_script(scripted, max_tokens) == script
    if isinstance(real, dict):
        assert scripted.get("request_id", scripted.get("id")) == real.get("request_id", real.get("id"))
    assert fake.requests[-1].body == {"model": "tiny-qwen3", **body}


@pytest.mark.vllm
async def test_fake_errors_like_real_vllm(vllm_qwen: VLLMProcess, fake: FakeVLLM) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        # HTTP errors: the very same body.
        bad_model = {"model": "nope", "token_ids": [1], "sampling_params": {"max_tokens": 1}}
        real = await client.post(vllm_qwen.url + "/inference/v1/generate", json=bad_model)
        scripted = await client.post(fake.url + "/inference/v1/generate", json=bad_model)
        assert real.status_code == 404
        assert (scripted.status_code, scripted.json()) == (real.status_code, real.json())

        # An error inside a stream (here: a prompt longer than max_model_len) is an SSE event.
        too_long = {"model": "tiny-qwen3", "token_ids": list(range(1, 32800)),
                    "sampling_params": {"max_tokens": 1}, "stream": True}
        real = await client.post(vllm_qwen.url + "/inference/v1/generate", json=too_long)
        fake.queue(Script([5], error_after=0, error_message="boom"))
        scripted = await client.post(fake.url + "/inference/v1/generate", json=too_long)
        assert real.status_code == scripted.status_code == 200
        assert shapes(sse_events(scripted.text)) == shapes(sse_events(real.text))
        assert scripted.text.startswith('data: {"error": {"message": "boom", ') and real.text.startswith(
            'data: {"error": {"message": ')

        real_models = (await client.get(vllm_qwen.url + "/v1/models")).json()
        fake_models = (await client.get(fake.url + "/v1/models")).json()
        assert shape(fake_models) == shape(real_models)
        assert fake_models["data"][0]["max_model_len"] == real_models["data"][0]["max_model_len"] == 32768


async def test_fake_streams_scripted_chunks_and_records_requests(fake: FakeVLLM) -> None:
    fake.queue(Script([11, 12, 13, 151645], chunks=[1, 3], finish_reason="stop", stop_reason=151645,
                      logprobs=[-0.5, -1.5, -2.5, -0.25], cached_tokens=2))
    body = {"model": "tiny-qwen3", "token_ids": [1, 2, 3], "stream": True, "request_id": "abc",
            "sampling_params": {"max_tokens": 9, "logprobs": 0}, "stream_options": {"include_usage": True}}
    async with httpx.AsyncClient() as client:
        events = sse_events((await client.post(fake.url + "/inference/v1/generate", json=body)).text)
    assert [[c["token_ids"] for c in e["choices"]] for e in events[:-1]] == [[[11]], [[12, 13, 151645]], []]
    assert [e["choices"][0]["finish_reason"] for e in events[:2]] == [None, "stop"]
    assert events[1]["choices"][0]["stop_reason"] == 151645
    assert [x["logprob"] for x in events[1]["choices"][0]["logprobs"]["content"]] == [-1.5, -2.5, -0.25]
    assert events[2]["usage"] == {"prompt_tokens": 3, "total_tokens": 7, "completion_tokens": 4,
                                  "prompt_tokens_details": {"cached_tokens": 2}}
    assert events[-1] == "[DONE]"
    assert {e["request_id"] for e in events[:-1]} == {"generate-tokens-abc"}
    assert fake.bodies("/inference/v1/generate") == [body]
    assert fake.completed == ["generate-tokens-abc"]


async def test_fake_records_disconnects_and_aborts(fake: FakeVLLM) -> None:
    fake.queue(Script([7, 8], hang=True))
    body = {"model": "tiny-qwen3", "token_ids": [1], "stream": True, "request_id": "gone",
            "sampling_params": {"max_tokens": 5}}
    async with httpx.AsyncClient() as client:
        async with client.stream("POST", fake.url + "/inference/v1/generate", json=body) as response:
            lines = response.aiter_lines()
            assert json.loads((await anext(lines))[len("data: "):])["choices"][0]["token_ids"] == [7]
        # The client left without [DONE]; abort as the gateway does.
        await client.post(fake.url + "/inference/v1/abort_requests", json={"request_ids": ["generate-tokens-gone"]})
        for _ in range(100):
            if fake.disconnected:
                break
            await asyncio.sleep(0.05)
    assert fake.disconnected == ["generate-tokens-gone"] and fake.completed == []
    assert fake.aborted == ["generate-tokens-gone"]


async def test_fake_status_and_disabled_scale_out(fake: FakeVLLM) -> None:
    fake.queue(Script([], status=503, error_message="overloaded"))
    async with httpx.AsyncClient() as client:
        busy = await client.post(fake.url + "/v1/completions", json={"model": "tiny-qwen3", "prompt": [1]})
        assert (busy.status_code, busy.json()["error"]["message"]) == (503, "overloaded")
        fake.enable_scale_out = False
        disabled = await client.post(fake.url + "/inference/v1/generate", json={"token_ids": [1]})
        assert disabled.status_code == 403
        assert disabled.json()["error"]["type"] == "PermissionDeniedError"


async def test_the_pools_probes_take_no_script_and_are_kept_apart(fake: FakeVLLM) -> None:
    """A real pool admits the fake (probe + warmup) with a script queued: the script is left for
    the first model call, and `requests` holds that call only."""
    fake.queue(Script([11, 12]))
    pool = Pool([fake.url], policy=HealthPolicy(interval=60))
    await pool.start()
    try:
        assert pool.ready
        async with httpx.AsyncClient() as client:
            body = {"model": "tiny-qwen3", "token_ids": [1, 2], "sampling_params": {"max_tokens": 5}}
            answer = (await client.post(fake.url + "/inference/v1/generate", json=body)).json()
    finally:
        await pool.close()
    assert answer["choices"][0]["token_ids"] == [11, 12]
    assert [r.body["request_id"].split("_")[0] for r in fake.probes] == ["probe", "warmup"]
    assert [r.body["token_ids"] for r in fake.probes] == [[0], [0]]
    assert fake.bodies("/inference/v1/generate") == [body]
