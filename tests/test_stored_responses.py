"""Stored responses: retrieve, list input items, delete; `background: true` answers `queued`
at once and is polled to its end, or cancelled (which aborts the generation upstream)."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.conformance.openai_schema import errors
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.stack import fake_stack


@pytest.fixture(scope="module")
def stack(qwen_tokenizer_dir):
    with fake_stack(qwen_tokenizer_dir, served_model_name="m") as stack:
        yield stack


def _create(stack, **fields) -> dict:
    response = httpx.post(stack.url + "/v1/responses", json={"model": "m", **fields}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _poll(stack, response_id: str, until: set[str]) -> dict:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = httpx.get(f"{stack.url}/v1/responses/{response_id}", timeout=10).json()
        if found["status"] in until:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{response_id} never reached {until}")


def test_a_stored_response_is_retrieved_listed_and_deleted(stack, tokenizer):
    stack.reset()
    stack.fake.queue(Script(ids(tokenizer, "Hi") + [IM_END]), Script(ids(tokenizer, "Bye") + [IM_END]))
    first = _create(stack, input="Hello")
    second = _create(stack, input="Again", previous_response_id=first["id"])
    got = httpx.get(f"{stack.url}/v1/responses/{second['id']}", timeout=10).json()
    assert got == second and errors("Response", got) == []
    items = httpx.get(f"{stack.url}/v1/responses/{second['id']}/input_items", params={"order": "asc"},
                      timeout=10).json()
    assert [(item["type"], item.get("role")) for item in items["data"]] == [
        ("message", "user"), ("message", "assistant"), ("message", "user")]
    assert items["data"][1]["content"][0]["text"] == "Hi" and not items["has_more"]
    assert errors("ResponseItemList", items) == []
    page = httpx.get(f"{stack.url}/v1/responses/{second['id']}/input_items",
                     params={"limit": 1, "after": items["data"][0]["id"], "order": "asc"}, timeout=10).json()
    assert page["data"] == items["data"][1:2] and page["has_more"]
    deleted = httpx.delete(f"{stack.url}/v1/responses/{second['id']}", timeout=10)
    assert deleted.json() == {"id": second["id"], "object": "response.deleted", "deleted": True}
    missing = httpx.get(f"{stack.url}/v1/responses/{second['id']}", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "response_not_found"
    assert httpx.delete(f"{stack.url}/v1/responses/{second['id']}", timeout=10).status_code == 404


def test_store_false_keeps_nothing(stack, tokenizer):
    stack.reset()
    stack.fake.queue(Script(ids(tokenizer, "Hi") + [IM_END]))
    created = _create(stack, input="Hello", store=False)
    assert httpx.get(f"{stack.url}/v1/responses/{created['id']}", timeout=10).status_code == 404


def test_background_answers_queued_and_is_polled_to_completion(stack, tokenizer):
    stack.reset()
    stack.fake.queue(Script(ids(tokenizer, "Done now") + [IM_END], delay=0.2))
    queued = _create(stack, input="Work", background=True)
    assert queued["status"] == "queued" and queued["background"] is True and queued["output"] == []
    done = _poll(stack, queued["id"], {"completed"})
    assert done["output"][0]["content"][0]["text"] == "Done now"
    assert errors("Response", done) == []


def test_cancel_stops_a_background_response_and_its_generation(stack, tokenizer):
    stack.reset()
    stack.fake.queue(Script(ids(tokenizer, "tick tock"), hang=True))
    queued = _create(stack, input="Work", background=True)
    _poll(stack, queued["id"], {"in_progress"})
    cancelled = httpx.post(f"{stack.url}/v1/responses/{queued['id']}/cancel", timeout=10)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert _poll(stack, queued["id"], {"cancelled"})["status"] == "cancelled"
    deadline = time.monotonic() + 5
    while not stack.fake.aborted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(stack.fake.aborted) == 1
    again = httpx.post(f"{stack.url}/v1/responses/{queued['id']}/cancel", timeout=10)
    assert again.status_code == 400 and again.json()["error"]["code"] == "response_not_cancellable"


@pytest.mark.parametrize("fields", [{"background": True, "store": False}, {"background": True, "stream": True}])
def test_background_without_store_or_with_stream_is_a_400(stack, fields):
    response = httpx.post(stack.url + "/v1/responses", json={"model": "m", "input": "x", **fields}, timeout=10)
    assert response.status_code == 400 and response.json()["error"]["param"] == "background"


def test_the_gateway_describes_its_api_and_extensions(stack):
    """GET /openapi.json covers every route the gateway serves and names its extensions."""
    spec = httpx.get(stack.url + "/openapi.json", timeout=10).json()
    assert spec["openapi"] == "3.1.0"
    assert set(spec["paths"]) >= {"/v1/responses", "/v1/responses/compact", "/v1/responses/{response_id}",
                                  "/v1/responses/{response_id}/input_items", "/v1/responses/{response_id}/cancel",
                                  "/v1/chat/completions", "/v1/models", "/v1/rollouts/{rollout_id}"}
    body = spec["paths"]["/v1/responses"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {"return_token_ids", "rollout_id", "response_mask"} <= set(body["allOf"][1]["properties"])
