"""A Codex-shaped session over HTTP (the whole history resent every turn under its
prompt_cache_key): after the first turn, requests take the bytes-recognised path, and the
prompts sent upstream are exactly those of the ordinary path."""

from __future__ import annotations

import json
from itertools import pairwise

import httpx
import orjson

from gateway.adapters.responses import turn as responses_route
from gateway.adapters.responses.input import parse_request
from gateway.core.settings import Settings
from gateway.server.app import build_runtime
from gateway.tokenfix.prompt import build_prompt
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.gateway_server import running_gateway

IM_END, THINK, END_THINK, TOOL_CALL, END_TOOL_CALL = 151645, 151667, 151668, 151657, 151658
GENERATE = "/inference/v1/generate"
TOOLS = [{"type": "function", "name": "exec_command", "description": "Run a shell command",
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]


def test_a_resent_history_is_read_from_its_new_bytes_and_continues_the_exact_tokens(qwen_tokenizer_dir, tokenizer,
                                                                                    monkeypatch):
    taken = []
    parse_resent = responses_route.parse_resent

    def parse_and_keep(*args):
        taken.append(parse_resent(*args))
        return taken[-1]

    monkeypatch.setattr(responses_route, "parse_resent", parse_and_keep)

    def ids(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    with FakeVLLM(max_model_len=8192) as fake:
        settings = Settings(model=str(qwen_tokenizer_dir), upstreams=[fake.url], served_model_name="tiny-qwen3")
        runtime = build_runtime(settings)
        with running_gateway(settings, runtime) as url:
            history = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
                       {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Look around."}]}]
            expected = []
            for step in range(4):
                # Drifted tokens ("l"+"s" where the tokenizer has "ls"): only splicing keeps them.
                fake.queue(Script([THINK, *ids(f"\nStep {step}.\n"), END_THINK, *ids("\n\n"), TOOL_CALL,
                                   *ids('\n{"name": "exec_command", "arguments": {"cmd": "'), *ids("l"), *ids("s"),
                                   *ids('"}}\n'), END_TOOL_CALL, IM_END]))
                body = {"model": "tiny-qwen3", "input": history, "tools": TOOLS, "store": False,
                        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "codex-thread"}
                session = runtime.store.sessions.peek("codex-thread")
                if session is not None:  # what the ordinary path would send
                    prompt = build_prompt(runtime.format, parse_request(body).conversation, session.state)
                    expected.append(list(prompt.ids))
                answer = httpx.post(url + "/v1/responses", content=orjson.dumps(body),
                                    headers={"content-type": "application/json"}, timeout=30)
                assert answer.status_code == 200, answer.text
                output = answer.json()["output"]
                call = output[-1]
                assert call["type"] == "function_call" and json.loads(call["arguments"]) == {"cmd": "ls"}
                history = [*history, *output, {"type": "function_call_output", "call_id": call["call_id"],
                                               "output": f"file_{step}.txt"}]

    # the first request has no session to continue (nothing to read it against); each later one is read so
    assert [resent is not None for resent in taken] == [True, True, True]
    prompts = [body["token_ids"] for body in fake.bodies(GENERATE)]
    assert prompts[1:] == expected
    drifted = [*ids("l"), *ids("s"), *ids('"}}\n'), END_TOOL_CALL, IM_END]
    assert drifted[:2] != ids("ls")
    for before, after in pairwise(prompts):
        end = after.index(IM_END, len(before)) + 1  # the model's turn, as it generated it
        assert after[:len(before)] == before and after[end - len(drifted):end] == drifted
