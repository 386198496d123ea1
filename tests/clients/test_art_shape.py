"""ART (OpenPipe/ART) trains on the ids it reads back from Chat Completions logprobs.

Its vLLM is launched with `--return-tokens-as-token-ids` and always returns logprobs; ART's
`tokenize_trajectory` (src/art/local/tokenize.py at 0b2e714, the loop over
`trajectory.messages_and_choices`) replaces each assistant choice's sentinel token with
`int(token_logprob.token.split(":")[1]) for token_logprob in choice.logprobs.content` and puts
`assistant_mask` 1 under exactly those positions. Here: the gateway started with the same flag,
the real `openai` SDK's `Choice` objects, and ART's expression applied to them, over a two-turn
tool trajectory: the ids ART trains on are the ids the replica generated, and the second
prompt starts with the first prompt and those ids.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import OpenAI

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, TOOL_CALL, ids
from tests.support.stack import Stack, fake_stack

GENERATE = "/inference/v1/generate"
TOOLS = [{"type": "function", "function": {"name": "exec_command", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def art_stack(qwen_tokenizer_dir) -> Iterator[Stack]:
    """The gateway as ART's vLLM is started: logprob tokens named by id for every request."""
    with fake_stack(qwen_tokenizer_dir, served_model_name="tiny-qwen3", return_tokens_as_token_ids=True) as stack:
        yield stack


def art_ids(choice) -> list[int]:
    """ART's own reading of a choice's generated ids (tokenize_trajectory, quoted)."""
    token_logprobs = choice.logprobs.content or choice.logprobs.refusal or []
    return [int(token_logprob.token.split(":")[1]) for token_logprob in token_logprobs]


def test_art_reads_exactly_the_generated_ids_turn_after_turn(art_stack, tokenizer):
    fake = art_stack.fakes[0]
    call = [TOOL_CALL, *ids(tokenizer, '\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n'),
            END_TOOL_CALL, IM_END]
    answer = [*ids(tokenizer, "Two files."), IM_END]
    fake.queue(Script(call, logprobs=[-0.1] * len(call)), Script(answer, logprobs=[-0.2] * len(answer)))
    client = OpenAI(base_url=art_stack.url + "/v1", api_key="none")
    messages: list[dict] = [{"role": "user", "content": "List the files."}]
    first = client.chat.completions.create(model="tiny-qwen3", messages=messages, tools=TOOLS, logprobs=True,
                                           extra_body={"rollout_id": "art-1"}).choices[0]
    assert art_ids(first) == call  # the tool call's markup and stop token included, as generated
    tool_call = first.message.tool_calls[0]
    messages += [first.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": tool_call.id, "content": "a.txt b.txt"}]
    second = client.chat.completions.create(model="tiny-qwen3", messages=messages, tools=TOOLS, logprobs=True,
                                            extra_body={"rollout_id": "art-1"}).choices[0]
    assert art_ids(second) == answer
    prompts = [body["token_ids"] for body in fake.bodies(GENERATE)[-2:]]
    assert prompts[1][:len(prompts[0]) + len(call)] == prompts[0] + call  # on-policy: the exact ids continue
