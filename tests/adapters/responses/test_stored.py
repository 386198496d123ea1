"""Stored responses: retrieve, list input items, delete; `background: true` answers `queued`
at once (waiting in a full gateway's queue, too) and is polled to its end, or cancelled (which
aborts the generation upstream); streamed, it is created, queued, then in progress."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from openai.types.responses import ResponseCreatedEvent, ResponseInProgressEvent, ResponseQueuedEvent

from tests.conformance.openai_schema import errors
from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.stack import fake_stack
from tests.support.waiting import DEADLINE, wait_for

pytestmark = pytest.mark.stack(served_model_name="m")


def _create(stack, **fields) -> dict:
    response = httpx.post(stack.url + "/v1/responses", json={"model": "m", **fields}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _poll(stack, response_id: str, until: set[str]) -> dict:
    deadline = time.monotonic() + DEADLINE
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
    wait_for(lambda: stack.fake.aborted, "the cancelled generation was aborted")
    assert len(stack.fake.aborted) == 1
    again = httpx.post(f"{stack.url}/v1/responses/{queued['id']}/cancel", timeout=10)
    assert again.status_code == 400 and again.json()["error"]["code"] == "response_not_cancellable"


@pytest.mark.parametrize(("fault", "why"), [({"status": 400}, "prompt rejected by the replica"),
                                           ({"error_after": 2}, "failed while generating")], ids=["refused", "mid-stream"])
def test_a_background_response_that_fails_is_stored_as_failed(stack, tokenizer, fault, why):
    """The exchange keeps a background response's state: refused before anything was generated, or
    failing mid-stream, it is a failed response (not an HTTP error nobody reads), with the replica's reason."""
    stack.reset()
    stack.fake.queue(Script(ids(tokenizer, "never ends well"), error_message="prompt rejected by the replica", **fault))
    queued = _create(stack, input="Work", background=True)
    failed = _poll(stack, queued["id"], {"failed", "completed"})
    assert failed["status"] == "failed"
    assert why in failed["error"]["message"]
    assert errors("Response", failed) == []


def _events(response: httpx.Response, until: str | None = None) -> list[dict]:
    """The events of a streamed response, up to the first of type `until`."""
    events = []
    for line in response.iter_lines():
        if line.startswith("data:"):
            events.append(json.loads(line[5:]))
            if events[-1]["type"] == until:
                break
    return events


def test_a_streamed_background_response_can_be_replayed_after_any_event(stack, tokenizer):
    stack.reset()
    stack.fake.queue(Script(ids(tokenizer, "All done") + [IM_END]))
    with httpx.stream("POST", stack.url + "/v1/responses", timeout=30,
                      json={"model": "m", "input": "Work", "background": True, "stream": True}) as response:
        events = _events(response)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    lifecycle = ("ResponseCreatedEvent", "ResponseQueuedEvent", "ResponseInProgressEvent")
    assert [errors(name, event) for name, event in zip(lifecycle, events, strict=False)] == [[], [], []]
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "All done"
    response_id = events[-1]["response"]["id"]
    for after in (0, 3, len(events) - 2):
        with httpx.stream("GET", f"{stack.url}/v1/responses/{response_id}?stream=true&starting_after={after}",
                          timeout=30) as resumed:
            assert _events(resumed) == events[after + 1:]


def test_a_streamed_background_response_is_created_queued_then_in_progress(stack, tokenizer):
    """OpenAI's order for `background` + `stream`: response.created and response.queued (status
    queued), then response.in_progress once it runs; read by the openai SDK's own event types."""
    stack.reset()
    stack.fake.queue(Script(ids(tokenizer, "All done") + [IM_END]))
    with stack.client().responses.create(model="m", input="Work", background=True, stream=True) as stream:
        events = list(stream)
    assert [type(e) for e in events[:3]] == [ResponseCreatedEvent, ResponseQueuedEvent, ResponseInProgressEvent]
    assert [e.response.status for e in events[:3]] == ["queued", "queued", "in_progress"]
    assert all(e.response.background for e in events[:3])
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "All done"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events].count("response.created") == 1


def test_a_background_response_waits_queued_in_a_full_gateway(qwen_tokenizer_dir, tokenizer):
    """With the one slot held and room in the queue, a background create answers at once, queued
    (streamed: created and queued only), stays queued while it waits, and runs once the slot is
    free; one cancelled while it waits leaves the queue; beyond the queue, a 429 stores nothing."""
    with fake_stack(qwen_tokenizer_dir, served_model_name="m", max_concurrent_requests=1,
                    max_queued_requests=2) as stack:
        stack.fake.queue(Script(ids(tokenizer, "busy"), hang=True), Script(ids(tokenizer, "Later") + [IM_END]),
                         Script(ids(tokenizer, "ok") + [IM_END]))
        client = stack.client(timeout=DEADLINE)  # a create that waits for its place fails, not hangs
        busy = client.responses.create(model="m", input="Work", background=True)
        _poll(stack, busy.id, {"in_progress"})
        with client.responses.create(model="m", input="Wait", background=True, stream=True) as stream:
            events = iter(stream)
            first = [next(events), next(events)]
            assert [(e.type, e.response.status) for e in first] == [("response.created", "queued"),
                                                                     ("response.queued", "queued")]
            waiting = client.responses.create(model="m", input="Also", background=True)
            assert waiting.status == "queued" and waiting.output == []
            with pytest.raises(openai.RateLimitError):
                client.responses.create(model="m", input="Full", background=True)
            assert [r.status for r in (client.responses.retrieve(first[0].response.id),
                                       client.responses.retrieve(waiting.id))] == ["queued", "queued"]
            assert client.responses.cancel(waiting.id).status == "cancelled"
            assert len(stack.fake.requests) == 1  # neither waiting response reached the replica
            client.responses.cancel(busy.id)
            rest = list(events)
        assert [e.type for e in rest[:1]] == ["response.in_progress"] and rest[-1].type == "response.completed"
        assert rest[-1].response.output_text == "Later"
        assert [e.sequence_number for e in first + rest] == list(range(len(first) + len(rest)))
        assert client.responses.retrieve(waiting.id).status == "cancelled"
        assert client.responses.create(model="m", input="x").output_text == "ok"  # every slot came back


def test_a_dropped_background_stream_resumes_where_it_left_off(stack, tokenizer):
    stack.reset()
    text = "tick tock and more"
    output = ids(tokenizer, text)
    stack.fake.queue(Script(output, chunks=[1] * len(output), delay=0.1, hang=True))
    with httpx.stream("POST", stack.url + "/v1/responses", timeout=30,
                      json={"model": "m", "input": "Work", "background": True, "stream": True}) as response:
        first = _events(response, until="response.output_text.delta")  # then the client drops
    response_id = first[0]["response"]["id"]
    got = "".join(e["delta"] for e in first if e["type"] == "response.output_text.delta")
    last = first[-1]["sequence_number"]
    with httpx.stream("GET", f"{stack.url}/v1/responses/{response_id}?stream=true&starting_after={last}",
                      timeout=30) as resumed:
        rest = []
        for line in resumed.iter_lines():
            if line.startswith("data:"):
                rest.append(json.loads(line[5:]))
                got += rest[-1].get("delta", "") if rest[-1]["type"] == "response.output_text.delta" else ""
                if got == text:
                    break
    assert got == text  # the generation went on without a reader; nothing was lost or repeated
    assert any(e["type"] == "response.output_text.delta" for e in rest)  # some came only on resuming
    assert [e["sequence_number"] for e in rest] == list(range(last + 1, last + 1 + len(rest)))
    assert httpx.post(f"{stack.url}/v1/responses/{response_id}/cancel", timeout=10).json()["status"] == "cancelled"


def test_only_background_responses_stream_on_get(stack, tokenizer):
    stack.reset()
    stack.fake.queue(Script(ids(tokenizer, "Hi") + [IM_END]))
    created = _create(stack, input="Hello")
    plain = httpx.get(f"{stack.url}/v1/responses/{created['id']}?stream=true", timeout=10)
    assert plain.status_code == 400 and plain.json()["error"]["code"] == "response_not_streamable"
    bad = httpx.get(f"{stack.url}/v1/responses/{created['id']}?stream=true&starting_after=x", timeout=10)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "starting_after"


def test_a_running_background_response_holds_a_request_slot(qwen_tokenizer_dir, tokenizer):
    with fake_stack(qwen_tokenizer_dir, served_model_name="m", max_concurrent_requests=1) as stack:
        stack.fake.queue(Script(ids(tokenizer, "busy"), hang=True), Script(ids(tokenizer, "ok") + [IM_END]))
        queued = _create(stack, input="Work", background=True)
        _poll(stack, queued["id"], {"in_progress"})
        refused = httpx.post(stack.url + "/v1/responses", json={"model": "m", "input": "x"}, timeout=10)
        assert refused.status_code == 429
        httpx.post(f"{stack.url}/v1/responses/{queued['id']}/cancel", timeout=10)
        assert _create(stack, input="x")["status"] == "completed"  # the slot came back with the task's end


def test_background_without_store_is_a_400(stack):
    fields = {"background": True, "store": False}
    response = httpx.post(stack.url + "/v1/responses", json={"model": "m", "input": "x", **fields}, timeout=10)
    assert response.status_code == 400 and response.json()["error"]["param"] == "background"


def test_the_gateway_describes_its_api_and_extensions(stack):
    """GET /openapi.json covers every route the gateway serves and names its extensions."""
    spec = httpx.get(stack.url + "/openapi.json", timeout=10).json()
    assert spec["openapi"] == "3.1.0"
    assert set(spec["paths"]) >= {"/v1/responses", "/v1/responses/compact", "/v1/responses/{response_id}",
                                  "/v1/responses/{response_id}/input_items", "/v1/responses/{response_id}/cancel",
                                  "/v1/chat/completions", "/v1/models", "/v1/rollouts/{rollout_id}",
                                  "/v1/conversations", "/v1/conversations/{conversation_id}/items/{item_id}",
                                  "/tokenize", "/detokenize", "/v1/completions", "/inference/v1/generate"}
    body = spec["paths"]["/v1/responses"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {"return_token_ids", "rollout_id", "response_mask"} <= set(body["allOf"][1]["properties"])
