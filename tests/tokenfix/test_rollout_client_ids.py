"""Client-sent ids (NeMo-RL's convention) and stop ids, over the scripted fake vLLM.

Ids a client attaches to an assistant message are used only when they cover the history
they claim to; otherwise the prompt is the template's full render and the call is flagged.
Every stop id the model may end with closes its turn.
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import ENDOFTEXT, IM_END, ids

GENERATE = "/inference/v1/generate"
SYSTEM = {"role": "system", "content": "Be brief."}


@pytest.fixture
def url(stack):
    return stack.url


def chat(url, messages, **extra):
    return httpx.post(url + "/v1/chat/completions", timeout=30,
                      json={"model": "tiny-qwen3", "messages": messages, **extra})


def render(tokenizer, messages):
    plain = [{k: v for k, v in m.items() if "token_ids" not in k} for m in messages]
    return list(tokenizer.apply_chat_template(plain, add_generation_prompt=True, tokenize=True, return_dict=False))


def turn_of(url, rollout_id):
    response = httpx.get(f"{url}/v1/rollouts/{rollout_id}")
    assert response.status_code == 200, response.text
    return response.json()["turns"][-1]


def hello(tokenizer):
    """A non-canonical tokenization of "Hello" (the template would write it as one token)."""
    return [*[ids(tokenizer, c)[0] for c in "Hello"], IM_END]


def test_empty_client_ids_are_absent_and_the_whole_history_is_rendered(fake, url, tokenizer):
    fake.queue(Script([*ids(tokenizer, "x"), IM_END]))
    messages = [SYSTEM, {"role": "user", "content": "say hello"},
                {"role": "assistant", "content": "Hello", "prompt_token_ids": [], "generation_token_ids": []},
                {"role": "user", "content": "again"}]
    response = chat(url, messages, rollout_id="empty-ids")
    assert response.status_code == 200, response.text
    assert fake.bodies(GENERATE)[-1]["token_ids"] == render(tokenizer, messages)
    turn = turn_of(url, "empty-ids")
    assert not turn["spliced"] and not turn["non_monotonic"]


@pytest.mark.parametrize("empty", ["prompt_token_ids", "generation_token_ids"])
def test_one_empty_client_id_list_is_a_400_naming_it(fake, url, tokenizer, empty):
    message = {"role": "assistant", "content": "Hello", "prompt_token_ids": [1, 2], "generation_token_ids": [3],
               empty: []}
    response = chat(url, [{"role": "user", "content": "hi"}, message, {"role": "user", "content": "again"}])
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == f"messages[1].{empty}" and "empty" in error["message"]
    assert fake.bodies(GENERATE) == []


def _client_ids_case(tokenizer, case):
    """(history sent, the ids' prompt) for ids that do not cover the history they are attached to."""
    user = {"role": "user", "content": "say hello"}
    if case == "user message edited":
        return [{"role": "user", "content": "say hi"}], render(tokenizer, [user])
    if case == "system message dropped":
        return [user], render(tokenizer, [SYSTEM, user])
    if case == "prompt ids lack the system part":
        return [SYSTEM, user], render(tokenizer, [user])
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["user message edited", "system message dropped", "prompt ids lack the system part",
                                  "content changed"])
def test_client_ids_that_do_not_cover_the_history_are_not_spliced_and_are_flagged(fake, url, tokenizer, case):
    if case == "content changed":
        head, prompt, content = [{"role": "user", "content": "say hello"}], None, "Goodbye"
        prompt = render(tokenizer, head)
    else:
        (head, prompt), content = _client_ids_case(tokenizer, case), "Hello"
    messages = [*head, {"role": "assistant", "content": content, "prompt_token_ids": prompt,
                        "generation_token_ids": hello(tokenizer)}, {"role": "user", "content": "again"}]
    fake.queue(Script([*ids(tokenizer, "x"), IM_END]))
    rollout_id = "bad-" + case.replace(" ", "-")
    assert chat(url, messages, rollout_id=rollout_id).status_code == 200
    assert fake.bodies(GENERATE)[-1]["token_ids"] == render(tokenizer, messages)
    turn = turn_of(url, rollout_id)
    assert turn["non_monotonic"] and not turn["spliced"]
    assert "'prompt_token_ids'" in turn["client_ids_mismatch"] or "'generation_token_ids'" in \
        turn["client_ids_mismatch"]


def test_client_ids_that_cover_the_history_are_spliced_with_a_system_message_and_tool_calls(fake, url, tokenizer):
    tools = [{"type": "function", "function": {"name": "exec_command", "parameters": {
        "type": "object", "properties": {"cmd": {"type": "string"}}}}}]
    head = [SYSTEM, {"role": "user", "content": "list"}]
    generated = [*ids(tokenizer, '<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n</tool_call>'),
                 IM_END]
    fake.queue(Script(generated))
    one = chat(url, head, tools=tools, return_token_ids=True).json()  # no rollout: the ids are the client's to keep
    prompt, call = one["prompt_token_ids"], one["choices"][0]["message"]["tool_calls"][0]
    messages = [*head, {"role": "assistant", "content": None, "tool_calls": [call], "prompt_token_ids": prompt,
                        "generation_token_ids": generated},
                {"role": "tool", "tool_call_id": call["id"], "content": "a.txt"}]
    fake.queue(Script([*ids(tokenizer, "x"), IM_END]))
    assert chat(url, messages, tools=tools, rollout_id="good-tools").status_code == 200
    sent = fake.bodies(GENERATE)[-1]["token_ids"]
    assert sent[:len(prompt) + len(generated)] == [*prompt, *generated]
    turn = turn_of(url, "good-tools")
    assert turn["spliced"] and not turn["non_monotonic"] and turn["client_ids_mismatch"] is None


def test_a_turn_ended_by_endoftext_is_closed_by_it_and_the_trajectory_names_the_stop_id(fake, url, tokenizer):
    first, second = [*ids(tokenizer, "Hi"), ENDOFTEXT], [*ids(tokenizer, "Bye"), IM_END]
    fake.queue(Script(first), Script(second))
    messages = [{"role": "user", "content": "hello"}]
    one = chat(url, messages, rollout_id="eot").json()
    prompt1 = fake.bodies(GENERATE)[-1]["token_ids"]
    messages += [{"role": "assistant", "content": one["choices"][0]["message"]["content"]},
                 {"role": "user", "content": "again"}]
    assert chat(url, messages, rollout_id="eot").status_code == 200
    prompt2 = fake.bodies(GENERATE)[-1]["token_ids"]
    assert prompt2 == [*prompt1, *first, *ids(tokenizer, "\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n")]
    trajectory = httpx.get(f"{url}/v1/rollouts/eot").json()
    assert [t["stop_token_id"] for t in trajectory["turns"]] == [ENDOFTEXT, IM_END]
    assert [t["spliced"] for t in trajectory["turns"]] == [False, True]
    assert len(trajectory["segments"]) == 1


def test_a_stop_string_that_ends_a_rollout_turn_is_its_stop_reason(fake, url, tokenizer):
    fake.queue(Script([*ids(tokenizer, "x=1</answer> tail"), IM_END], hang=True), Script([*ids(tokenizer, "ok"), IM_END]))
    messages = [{"role": "user", "content": "solve"}]
    one = chat(url, messages, rollout_id="stops", stop=["</answer>"]).json()["choices"][0]
    assert (one["finish_reason"], one["stop_reason"]) == ("stop", "</answer>")
    messages += [{"role": "assistant", "content": one["message"]["content"]}, {"role": "user", "content": "next"}]
    assert chat(url, messages, rollout_id="stops").status_code == 200
    turns = httpx.get(f"{url}/v1/rollouts/stops").json()["turns"]
    assert [(t["stop_reason"], t["stop_token_id"]) for t in turns] == [("</answer>", None), (IM_END, IM_END)]
    verl = httpx.get(f"{url}/v1/rollouts/stops?format=verl").json()["data"][0]
    assert [t["stop_reason"] for t in verl["extra_fields"]["turns"]] == ["</answer>", IM_END]


def test_the_rollouts_own_ids_sent_back_under_an_edited_history_are_flagged(fake, url, tokenizer):
    """Ids equal to the rollout's last call are checked by its digest: an edit still shows."""
    fake.queue(Script(hello(tokenizer)), Script([*ids(tokenizer, "x"), IM_END]))
    messages = [{"role": "user", "content": "say hello"}]
    message = chat(url, messages, rollout_id="own", return_token_ids=True).json()["choices"][0]["message"]
    messages += [{k: v for k, v in message.items() if v is not None}, {"role": "user", "content": "again"}]
    prompt1 = fake.bodies(GENERATE)[-1]["token_ids"]
    assert chat(url, messages, rollout_id="own").status_code == 200
    assert fake.bodies(GENERATE)[-1]["token_ids"][:len(prompt1) + 6] == [*prompt1, *hello(tokenizer)]
    assert not turn_of(url, "own")["non_monotonic"]

    fake.queue(Script(hello(tokenizer)), Script([*ids(tokenizer, "z"), IM_END]))
    messages = [{"role": "user", "content": "say hello"}]
    message = chat(url, messages, rollout_id="own-edited", return_token_ids=True).json()["choices"][0]["message"]
    messages = [{"role": "user", "content": "say hi"}, {k: v for k, v in message.items() if v is not None},
                {"role": "user", "content": "again"}]
    chat(url, messages, rollout_id="own-edited")
    assert fake.bodies(GENERATE)[-1]["token_ids"] == render(tokenizer, messages)
    assert turn_of(url, "own-edited")["non_monotonic"]
