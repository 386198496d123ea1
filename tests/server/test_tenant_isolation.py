"""Tenants: two API keys' tenants using the same `prompt_cache_key`, the same `rollout_id`
and each other's response ids. No state crosses: each session continues its own exact
tokens (asserted on the ids the fake vLLM received), and another tenant's id answers
exactly as an unknown one does — the same status and the same body. Both state backends:
in process, and a real redis-server.
"""

from __future__ import annotations

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.sse import sse_events
from tests.support.stack import tenants_stack

MODEL = "tiny-qwen3"
ALICE, BOB, ADMIN = "sk-alice", "sk-bob", "sk-admin"
GENERATE = "/inference/v1/generate"


@pytest.fixture(scope="module", params=["memory", "redis"])
def stack(request, qwen_tokenizer_dir, tmp_path_factory):
    """The same gateway with its state in process, then in a real redis-server."""
    with tenants_stack(qwen_tokenizer_dir, {ALICE: "alice", BOB: "bob"}, request.param,
                       tmp_path_factory.mktemp("keys"), served_model_name=MODEL, admin_key=ADMIN) as running:
        yield running


def as_(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def post(url: str, path: str, key: str, body: dict) -> httpx.Response:
    return httpx.post(url + path, json=body, headers=as_(key), timeout=30)


def test_the_same_prompt_cache_key_keeps_each_tenants_exact_tokens(stack, fake, tokenizer):
    """Both send byte-identical bodies; each got "Hello world" tokenized its own (non-canonical)
    way, and each next prompt holds its own tenant's ids."""
    alice_ids = [*tokenizer.convert_tokens_to_ids(["Hel", "lo", "Ġwor", "ld"]), IM_END]
    bob_ids = [*tokenizer.convert_tokens_to_ids(["H", "ello", "Ġw", "orld"]), IM_END]
    assert tokenizer.decode(alice_ids[:-1]) == tokenizer.decode(bob_ids[:-1]) == "Hello world"
    fake.queue(Script(alice_ids), Script(bob_ids), Script(ids(tokenizer, "A") + [IM_END]),
               Script(ids(tokenizer, "B") + [IM_END]))
    history = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Greet"}]}]
    body = {"model": MODEL, "input": history, "prompt_cache_key": "thread-1", "stream": True}
    for key in (ALICE, BOB):
        with httpx.stream("POST", stack.url + "/v1/responses", json=body, headers=as_(key)) as r:
            assert sse_events(r)[-1]["response"]["output"][0]["content"][0]["text"] == "Hello world"
    history += [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello world"}]},
                {"type": "message", "role": "user", "content": "How are you?"}]
    for key in (ALICE, BOB):
        with httpx.stream("POST", stack.url + "/v1/responses", json={**body, "input": history},
                          headers=as_(key)) as r:
            assert sse_events(r)[-1]["type"] == "response.completed"
    first_alice, first_bob, second_alice, second_bob = (b["token_ids"] for b in fake.bodies(GENERATE))
    assert first_alice == first_bob
    assert second_alice[:len(first_alice) + len(alice_ids)] == first_alice + alice_ids
    assert second_bob[:len(first_bob) + len(bob_ids)] == first_bob + bob_ids
    assert second_alice[len(first_alice) + len(alice_ids):] == second_bob[len(first_bob) + len(bob_ids):]


def chat_turn(url: str, key: str, rollout_id: str, text: str) -> dict:
    response = post(url, "/v1/chat/completions", key, {"model": MODEL, "rollout_id": rollout_id,
                                                        "messages": [{"role": "user", "content": text}]})
    assert response.status_code == 200, response.text
    return response.json()


def test_the_same_rollout_id_is_two_trajectories(stack, fake, tokenizer):
    alice_out, bob_out = ids(tokenizer, "Alpha") + [IM_END], ids(tokenizer, "Beta") + [IM_END]
    fake.queue(Script(alice_out), Script(bob_out))
    chat_turn(stack.url, ALICE, "ep-1", "Alice asks")
    chat_turn(stack.url, BOB, "ep-1", "Bob asks")
    alice_prompt, bob_prompt = (b["token_ids"] for b in fake.bodies(GENERATE))
    alice = httpx.get(stack.url + "/v1/rollouts/ep-1", headers=as_(ALICE)).json()
    bob = httpx.get(stack.url + "/v1/rollouts/ep-1", headers=as_(BOB)).json()
    assert (alice["id"], alice["token_ids"]) == ("ep-1", alice_prompt + alice_out)
    assert (bob["id"], bob["token_ids"]) == ("ep-1", bob_prompt + bob_out)
    assert alice["loss_mask"] == [0] * len(alice_prompt) + [1] * len(alice_out)
    # Each tenant's figures are its own; the admin sees the store, and any rollout by its full id.
    own = httpx.get(stack.url + "/v1/rollouts", headers=as_(BOB)).json()
    assert (own["rollouts"], own["tokens"]) == (1, len(bob["token_ids"]))
    assert "created" not in own  # the store-wide counters are the admin's
    everything = httpx.get(stack.url + "/v1/rollouts", headers=as_(ADMIN)).json()
    assert everything["rollouts"] >= 2 and "created" in everything
    assert httpx.get(stack.url + "/v1/rollouts/alice:ep-1", headers=as_(ADMIN)).json()["token_ids"] == (
        alice["token_ids"])
    # Deleting hers leaves his; hers is then gone (410) for her, and still unknown (404) for him.
    assert httpx.delete(stack.url + "/v1/rollouts/ep-1", headers=as_(ALICE)).status_code == 200
    assert httpx.get(stack.url + "/v1/rollouts/ep-1", headers=as_(BOB)).json()["token_ids"] == bob["token_ids"]
    assert httpx.get(stack.url + "/v1/rollouts/ep-1", headers=as_(ALICE)).status_code == 410


def same_answer(a: httpx.Response, b: httpx.Response, a_id: str, b_id: str) -> None:
    assert a.status_code == b.status_code
    assert a.text.replace(a_id, "ID") == b.text.replace(b_id, "ID")


def test_another_tenants_rollout_is_an_unknown_one(stack, fake, tokenizer):
    fake.queue(Script(ids(tokenizer, "x") + [IM_END]))
    chat_turn(stack.url, ALICE, "ep-private", "secret")
    for method in ("GET", "DELETE"):
        foreign = httpx.request(method, stack.url + "/v1/rollouts/ep-private", headers=as_(BOB))
        unknown = httpx.request(method, stack.url + "/v1/rollouts/ep-nobody", headers=as_(BOB))
        assert foreign.status_code == 404
        same_answer(foreign, unknown, "ep-private", "ep-nobody")
        assert foreign.json()["error"]["message"] == "No rollout with id 'ep-private'."
    assert httpx.get(stack.url + "/v1/rollouts/ep-private", headers=as_(ALICE)).status_code == 200
    # A call on her rollout id starts his own: her tokens are not his prefix.
    fake.queue(Script(ids(tokenizer, "y") + [IM_END]))
    chat_turn(stack.url, BOB, "ep-private", "mine")
    bob = httpx.get(stack.url + "/v1/rollouts/ep-private", headers=as_(BOB)).json()
    assert bob["token_ids"] == fake.bodies(GENERATE)[-1]["token_ids"] + ids(tokenizer, "y") + [IM_END]


def test_another_tenants_response_id_is_an_unknown_one(stack, fake, tokenizer):
    generated = [*tokenizer.convert_tokens_to_ids(["Hel", "lo"]), IM_END]
    fake.queue(Script(generated), Script(ids(tokenizer, "Bye") + [IM_END]))
    first = post(stack.url, "/v1/responses", ALICE, {"model": MODEL, "input": "Greet", "store": True}).json()
    follow = {"model": MODEL, "input": "And now?", "previous_response_id": first["id"]}
    foreign = post(stack.url, "/v1/responses", BOB, follow)
    unknown = post(stack.url, "/v1/responses", BOB, {**follow, "previous_response_id": "resp_nobody"})
    assert foreign.status_code == 400 and foreign.json()["error"]["code"] == "previous_response_not_found"
    same_answer(foreign, unknown, first["id"], "resp_nobody")
    assert len(fake.bodies(GENERATE)) == 1  # neither reached a replica
    own = post(stack.url, "/v1/responses", ALICE, follow)
    assert own.status_code == 200, own.text
    first_prompt, second_prompt = (b["token_ids"] for b in fake.bodies(GENERATE))
    assert second_prompt[:len(first_prompt) + len(generated)] == first_prompt + generated


async def test_a_websocket_continues_only_its_tenants_stored_responses(stack, fake, tokenizer):
    fake.queue(Script(ids(tokenizer, "Hi") + [IM_END]))
    first = post(stack.url, "/v1/responses", ALICE, {"model": MODEL, "input": "Greet", "store": True}).json()
    url = stack.url.replace("http://", "ws://") + "/v1/responses"
    errors = []
    async with connect(url, additional_headers=as_(BOB)) as ws:
        for response_id in (first["id"], "resp_nobody"):
            await ws.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "x",
                                        "previous_response_id": response_id}).decode())
            errors.append(orjson.loads(await ws.recv()))
    assert errors[0]["error"]["code"] == "previous_response_not_found"
    assert orjson.dumps(errors[0]).decode().replace(first["id"], "ID") == (
        orjson.dumps(errors[1]).decode().replace("resp_nobody", "ID"))
    assert len(fake.bodies(GENERATE)) == 1
