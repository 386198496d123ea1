"""Rollouts over the scripted fake vLLM: exact trajectories, masks, 422s, segments, 410s.

Every trajectory is checked against what the fake vLLM actually received and generated.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from websockets.asyncio.client import connect

from gateway.core.settings import Settings
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.gateway_server import running_gateway
from tests.support.qwen3_tokens import END_THINK, END_TOOL_CALL, IM_END, THINK, TOOL_CALL, ids

GENERATE = "/inference/v1/generate"
TOOLS = [{"type": "function", "function": {"name": "exec_command", "description": "Run a shell command",
                                           "parameters": {"type": "object",
                                                          "properties": {"cmd": {"type": "string"}}}}}]


@pytest.fixture
def url(stack):
    return stack.url


def chat(url, messages, **extra):
    return httpx.post(url + "/v1/chat/completions", timeout=30, json={
        "model": "tiny-qwen3", "messages": messages, "tools": TOOLS, **extra})


def trajectory(url, rollout_id):
    response = httpx.get(f"{url}/v1/rollouts/{rollout_id}")
    assert response.status_code == 200, response.text
    return response.json()


def assistant(completion):
    """The assistant message a client appends to its history: the returned message as is."""
    message = completion["choices"][0]["message"]
    return {key: value for key, value in message.items() if value not in (None, [])}


def tool_call_output(tokenizer):
    return [THINK, *ids(tokenizer, "\nCheck.\n"), END_THINK, *ids(tokenizer, "\n\n"), TOOL_CALL,
            *ids(tokenizer, '\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n'), END_TOOL_CALL, IM_END]


def tool_result_delta(tokenizer, output):
    """What Qwen3's template adds after the model's `<|im_end|>`: the tool result and the next header."""
    return ids(tokenizer, f"\n<|im_start|>user\n<tool_response>\n{output}\n</tool_response><|im_end|>\n"
                          f"<|im_start|>assistant\n")


def test_tool_calling_rollout_records_exact_tokens_masks_and_logprobs(fake, url, tokenizer):
    first, second = tool_call_output(tokenizer), [*ids(tokenizer, "Two files."), IM_END]
    fake.queue(Script(first, logprobs=[-0.25] * len(first)), Script(second, logprobs=[-0.5] * len(second)))
    messages = [{"role": "user", "content": "list"}]
    one = chat(url, messages, rollout_id="r-tools").json()
    prompt1 = fake.bodies(GENERATE)[-1]["token_ids"]
    call = one["choices"][0]["message"]["tool_calls"][0]
    messages += [assistant(one), {"role": "tool", "tool_call_id": call["id"], "content": "a.txt b.txt"}]
    delta = tool_result_delta(tokenizer, "a.txt b.txt")

    sent = len(fake.bodies(GENERATE))
    wrong = chat(url, messages, rollout_id="r-tools", response_mask=[0] * (len(delta) - 1))
    assert wrong.status_code == 422
    error = wrong.json()["error"]
    assert error["param"] == "response_mask" and error["code"] == "response_mask_length_mismatch"
    assert f"(expected {len(delta)}, got {len(delta) - 1})" in error["message"]
    assert len(fake.bodies(GENERATE)) == sent  # nothing went upstream
    assert len(trajectory(url, "r-tools")["turns"]) == 1  # nor into the rollout

    mask = [0] * (len(delta) - 3) + [1, 1, 1]  # the client's choice is recorded as sent
    two = chat(url, messages, rollout_id="r-tools", response_mask=mask, logprobs=True)
    assert two.status_code == 200, two.text
    prompt2 = fake.bodies(GENERATE)[-1]["token_ids"]
    assert prompt2 == prompt1 + first + delta

    got = trajectory(url, "r-tools")
    assert got["token_ids"] == prompt2 + second
    assert got["loss_mask"] == [0] * len(prompt1) + [1] * len(first) + mask + [1] * len(second)
    assert got["logprobs"] == ([None] * len(prompt1) + [-0.25] * len(first) + [None] * len(delta)
                               + [-0.5] * len(second))
    turn1, turn2 = got["turns"]
    assert (turn1["start"], turn1["prompt_end"], turn1["end"]) == (0, len(prompt1), len(prompt1) + len(first))
    assert (turn2["start"], turn2["prompt_end"], turn2["end"]) == (turn1["end"], len(prompt2), len(got["token_ids"]))
    assert (turn1["mask_source"], turn2["mask_source"]) == ("gateway", "client")
    assert turn2["spliced"] and not turn2["non_monotonic"] and not turn2["truncated"]
    assert got["segments"] == [{"start": 0, "end": len(got["token_ids"]), "first_turn": 0}]


def test_cut_off_generation_is_closed_by_the_template_and_masked_zero(fake, url, tokenizer):
    cut = ids(tokenizer, "Let me think about th")  # no <|im_end|>: the length limit stopped it
    fake.queue(Script(cut, finish_reason="length"), Script([*ids(tokenizer, "ok"), IM_END]))
    messages = [{"role": "user", "content": "go"}]
    one = chat(url, messages, rollout_id="r-cut", max_tokens=len(cut)).json()
    assert one["choices"][0]["finish_reason"] == "length"
    prompt1 = fake.bodies(GENERATE)[-1]["token_ids"]
    messages += [assistant(one), {"role": "user", "content": "continue"}]
    chat(url, messages, rollout_id="r-cut")
    prompt2 = fake.bodies(GENERATE)[-1]["token_ids"]
    close = ids(tokenizer, "<|im_end|>\n<|im_start|>user\ncontinue<|im_end|>\n<|im_start|>assistant\n")
    assert prompt2 == prompt1 + cut + close  # the exact cut tokens, then the template's terminator

    got = trajectory(url, "r-cut")
    assert got["turns"][0]["truncated"] and got["turns"][0]["finish_reason"] == "length"
    start = len(prompt1) + len(cut)
    assert got["loss_mask"][start:len(prompt2)] == [0] * len(close)
    assert got["token_ids"][:len(prompt2)] == prompt2


def test_rewritten_history_opens_a_new_non_monotonic_segment(fake, url, tokenizer):
    first, second = [*ids(tokenizer, "Hi!"), IM_END], [*ids(tokenizer, "Sure."), IM_END]
    fake.queue(Script(first), Script(second))
    one = chat(url, [{"role": "user", "content": "hello"}], rollout_id="r-rewrite").json()
    prompt1 = fake.bodies(GENERATE)[-1]["token_ids"]
    # The client summarised the first user message: the history no longer continues the tokens.
    rewritten = [{"role": "user", "content": "(summary) greeting"}, assistant(one),
                 {"role": "user", "content": "more"}]
    expected = chat(url, rewritten, rollout_id="r-rewrite", response_mask=[0] * 3)
    assert expected.status_code == 422 and "non-monotonic" in expected.json()["error"]["message"]

    chat(url, rewritten, rollout_id="r-rewrite")
    prompt2 = fake.bodies(GENERATE)[-1]["token_ids"]
    naive = [*(tokenizer.apply_chat_template(rewritten, tools=TOOLS, add_generation_prompt=True, tokenize=True,
                                             return_dict=False))]
    assert prompt2 == naive  # rendered in full, not spliced onto tokens of another history

    got = trajectory(url, "r-rewrite")
    segment1 = prompt1 + first
    assert got["token_ids"] == segment1 + prompt2 + second
    assert got["segments"] == [{"start": 0, "end": len(segment1), "first_turn": 0},
                               {"start": len(segment1), "end": len(got["token_ids"]), "first_turn": 1}]
    turn = got["turns"][1]
    assert turn["non_monotonic"] and not turn["spliced"] and turn["segment"] == 1
    assert (turn["start"], turn["prompt_end"]) == (len(segment1), len(segment1) + len(prompt2))
    assert got["loss_mask"][len(segment1):] == [0] * len(prompt2) + [1] * len(second)


def test_client_token_ids_on_the_last_assistant_message_are_the_prefix(fake, url, tokenizer):
    # A non-canonical tokenization of "Hello": the template would re-tokenize it as one token.
    generated = [*[ids(tokenizer, c)[0] for c in "Hello"], IM_END]
    assert ids(tokenizer, "Hello") != generated[:-1]
    fake.queue(Script([*ids(tokenizer, "x"), IM_END]))
    render = [{"role": "user", "content": "say hello"}]
    prompt = tokenizer.apply_chat_template(render, tools=TOOLS, add_generation_prompt=True, tokenize=True,
                                           return_dict=False)
    messages = [*render, {"role": "assistant", "content": "Hello", "prompt_token_ids": list(prompt),
                          "generation_token_ids": generated}, {"role": "user", "content": "again"}]
    chat(url, messages, rollout_id="r-client")
    sent = fake.bodies(GENERATE)[-1]["token_ids"]
    assert sent == [*prompt, *generated, *ids(tokenizer, "\n<|im_start|>user\nagain<|im_end|>\n"
                                                          "<|im_start|>assistant\n")]
    turn = trajectory(url, "r-client")["turns"][0]
    assert turn["spliced"] and not turn["non_monotonic"]

    # Ids that cannot be the tokens of this history (two turns' worth) fall back and are flagged.
    fake.queue(Script([*ids(tokenizer, "y"), IM_END]))
    messages[1] = {**messages[1], "generation_token_ids": [*generated, *generated]}
    chat(url, messages, rollout_id="r-client-bad")
    full = tokenizer.apply_chat_template([{k: v for k, v in m.items() if "token_ids" not in k} for m in messages],
                                         tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert fake.bodies(GENERATE)[-1]["token_ids"] == list(full)
    turn = trajectory(url, "r-client-bad")["turns"][0]
    assert turn["non_monotonic"] and not turn["spliced"]


def test_delete_frees_and_gone_rollouts_answer_410_unknown_404(fake, url, tokenizer):
    fake.queue(Script([*ids(tokenizer, "a"), IM_END]))
    chat(url, [{"role": "user", "content": "x"}], rollout_id="r-del")
    deleted = httpx.delete(f"{url}/v1/rollouts/r-del")
    assert deleted.status_code == 200 and deleted.json() == {"object": "rollout.deleted", "id": "r-del",
                                                             "deleted": True}
    for response in (httpx.get(f"{url}/v1/rollouts/r-del"), httpx.delete(f"{url}/v1/rollouts/r-del"),
                     chat(url, [{"role": "user", "content": "x"}], rollout_id="r-del")):
        assert response.status_code == 410 and "deleted" in response.json()["error"]["message"]
    missing = httpx.get(f"{url}/v1/rollouts/never")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "rollout_not_found"


def test_eviction_keeps_memory_bounded_and_answers_410_with_why(fake, qwen_tokenizer_dir, tokenizer):
    settings = Settings(model=str(qwen_tokenizer_dir), upstreams=[fake.url], served_model_name="tiny-qwen3",
                        rollout_max_tokens=400)
    with running_gateway(settings) as url:
        fake.queue(Script([*ids(tokenizer, "a"), IM_END]), Script([*ids(tokenizer, "b"), IM_END]))
        chat(url, [{"role": "user", "content": "first"}], rollout_id="old")
        chat(url, [{"role": "user", "content": "second " * 150}], rollout_id="new")
        gone = httpx.get(f"{url}/v1/rollouts/old")
        assert gone.status_code == 410
        assert "evicted" in gone.json()["error"]["message"] and "400 tokens" in gone.json()["error"]["message"]
        assert chat(url, [{"role": "user", "content": "first"}], rollout_id="old").status_code == 410
        stats = httpx.get(f"{url}/v1/rollouts").json()
        assert (stats["rollouts"], stats["evicted"], stats["created"]) == (1, 1, 2)
        assert stats["tokens"] == trajectory(url, "new")["num_tokens"]
        metrics = httpx.get(f"{url}/metrics").text
        assert 'gateway_rollout_removals_total{reason="capacity"} 1.0' in metrics
        assert f"gateway_rollout_tokens {float(stats['tokens'])}" in metrics


def test_bad_rollout_fields(url):
    cases = [({"response_mask": [0]}, "response_mask", 400), ({"rollout_id": "r", "response_mask": [0, 2]},
                                                               "response_mask[1]", 400),
             ({"rollout_id": "has space"}, "rollout_id", 400), ({"rollout_id": 5}, "rollout_id", 400)]
    for extra, param, status in cases:
        response = chat(url, [{"role": "user", "content": "x"}], **extra)
        assert response.status_code == status and response.json()["error"]["param"] == param
    first_turn = chat(url, [{"role": "user", "content": "x"}], rollout_id="r-first", response_mask=[0])
    assert first_turn.status_code == 422
    assert "no earlier call, so every prompt token is new" in first_turn.json()["error"]["message"]


def test_streamed_calls_and_the_openai_sdk_extra_body(fake, url, tokenizer):
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    output = [*ids(tokenizer, "Hello there"), IM_END]
    fake.queue(Script(output, logprobs=[-1.5] * len(output)))
    chunks = list(client.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "hi"}],
                                                 stream=True, extra_body={"rollout_id": "r-sdk"}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello there"
    got = trajectory(url, "r-sdk")
    prompt = fake.bodies(GENERATE)[-1]["token_ids"]
    assert got["token_ids"] == prompt + output and got["logprobs"][len(prompt):] == [-1.5] * len(output)
    assert fake.bodies(GENERATE)[-1]["sampling_params"]["logprobs"] == 0  # asked for, for the trajectory


def test_responses_api_takes_rollout_id_as_an_extra_body_field(fake, url, tokenizer):
    first, second = [*ids(tokenizer, "One."), IM_END], [*ids(tokenizer, "Two."), IM_END]
    fake.queue(Script(first), Script(second))
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    history = [{"type": "message", "role": "user", "content": "count"}]
    one = client.responses.create(model="tiny-qwen3", input=history, extra_body={"rollout_id": "r-responses"})
    prompt1 = fake.bodies(GENERATE)[-1]["token_ids"]
    history += [item.model_dump(exclude_none=True) for item in one.output]
    history.append({"type": "message", "role": "user", "content": "again"})
    delta = ids(tokenizer, "\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n")
    client.responses.create(model="tiny-qwen3", input=history,
                            extra_body={"rollout_id": "r-responses", "response_mask": [0] * len(delta)})
    prompt2 = fake.bodies(GENERATE)[-1]["token_ids"]
    assert prompt2 == prompt1 + first + delta
    got = trajectory(url, "r-responses")
    assert got["token_ids"] == prompt2 + second
    assert got["loss_mask"] == [0] * len(prompt1) + [1] * len(first) + [0] * len(delta) + [1] * len(second)
    assert [t["mask_source"] for t in got["turns"]] == ["gateway", "client"]


async def test_websocket_mode_records_rollouts_and_answers_a_wrong_mask_with_an_error_event(fake, url, tokenizer):
    first, second = [*ids(tokenizer, "One."), IM_END], [*ids(tokenizer, "Two."), IM_END]
    fake.queue(Script(first), Script(second))
    delta = ids(tokenizer, "\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n")

    async def create(socket, **fields):
        await socket.send(json.dumps({"type": "response.create", "model": "tiny-qwen3", "rollout_id": "r-ws",
                                      **fields}))
        while True:
            event = json.loads(await socket.recv())
            if event["type"] in ("response.completed", "error"):
                return event

    async with connect(url.replace("http", "ws") + "/v1/responses") as socket:
        one = await create(socket, input="count")
        prompt1 = fake.bodies(GENERATE)[-1]["token_ids"]
        more = {"previous_response_id": one["response"]["id"],
                "input": [{"type": "message", "role": "user", "content": "again"}]}
        error = await create(socket, **more, response_mask=[0])
        assert error["status"] == 422 and f"(expected {len(delta)}, got 1)" in error["error"]["message"]
        await create(socket, **more, response_mask=[0] * len(delta))
    prompt2 = fake.bodies(GENERATE)[-1]["token_ids"]
    assert prompt2 == prompt1 + first + delta
    got = trajectory(url, "r-ws")
    assert got["token_ids"] == prompt2 + second
    assert got["loss_mask"] == [0] * len(prompt1) + [1] * len(first) + [0] * len(delta) + [1] * len(second)


def test_harmony_rollout_keeps_the_call_terminator_the_model_emitted(o200k_dir):
    from gateway.formats.harmony.format import load_harmony_format
    from tests.support.o200k import harmony_tokenizer_dir

    harmony = load_harmony_format()
    enc = harmony.encoding.encode
    message, channel, call, ret = 200008, 200005, 200012, 200002
    generated = [channel, *enc("commentary to=functions.exec_command json", disallowed_special=()), message,
                 *enc('{"cmd":"ls"}', disallowed_special=()), call]
    final = [channel, *enc("final", disallowed_special=()), message, *enc("Done.", disallowed_special=()), ret]
    with FakeVLLM(model="tiny-harmony") as fake, running_gateway(Settings(
            model=str(harmony_tokenizer_dir()), upstreams=[fake.url], chat_format="harmony")) as url:
        fake.queue(Script(generated, logprobs=[-0.1] * len(generated), stop_reason=call), Script(final))
        history = [{"role": "user", "content": "list files"}]
        one = httpx.post(url + "/v1/chat/completions", timeout=30, json={
            "model": "tiny-harmony", "messages": history, "tools": TOOLS, "rollout_id": "r-harmony"}).json()
        prompt1 = fake.bodies(GENERATE)[-1]["token_ids"]
        tool_call = one["choices"][0]["message"]["tool_calls"][0]
        assert tool_call["function"]["name"] == "exec_command"
        history += [assistant(one), {"role": "tool", "tool_call_id": tool_call["id"], "content": "a.txt"}]
        httpx.post(url + "/v1/chat/completions", timeout=30, json={
            "model": "tiny-harmony", "messages": history, "tools": TOOLS, "rollout_id": "r-harmony"})
        prompt2 = fake.bodies(GENERATE)[-1]["token_ids"]
        delta = prompt2[len(prompt1) + len(generated):]
        assert prompt2[:len(prompt1) + len(generated)] == prompt1 + generated  # <|call|> as the model wrote it
        assert harmony.decode(delta) == ('<|start|>functions.exec_command to=assistant<|channel|>commentary'
                                         '<|message|>a.txt<|end|><|start|>assistant')
        got = trajectory(url, "r-harmony")
        assert got["token_ids"] == prompt2 + final
        assert got["loss_mask"] == [0] * len(prompt1) + [1] * len(generated) + [0] * len(delta) + [1] * len(final)
        assert got["logprobs"][len(prompt1):len(prompt1) + len(generated)] == [-0.1] * len(generated)
        assert [turn["spliced"] for turn in got["turns"]] == [False, True]
