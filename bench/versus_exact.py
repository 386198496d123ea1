"""Exactness, measured: do later prompts hold exactly the tokens the model generated earlier?

An RL trainer computes the loss on the tokens the model sampled, in the context it sampled
them. If a later prompt re-tokenizes an earlier generation from its text, the context it
trains on is not the one the model saw (and the tokens themselves may differ: a random
model's generations are often not the canonical tokenization of their own text; a real
model's are too, less often). Here the tiny random model generates and the client feeds its
text back, as an agent or a trainer does, for two multi-turn rollouts:
- `chat`: Chat Completions, the assistant's message and a user's nudge each turn;
- `responses`: Responses with Codex's instructions and tools, its output items echoed back.

Where the ids come from:
- vLLM's own server: each response's own ids — Chat's `return_token_ids` (`prompt_token_ids`,
  `choices[].token_ids`), Responses' `enable_response_messages` (`input_messages[].tokens`,
  `output_messages[].tokens`) — which are what its engine was given and generated;
- the gateway: its rollout export (`rollout_id` on each call, then `GET /v1/rollouts/{id}`):
  each call's prompt and generation as vLLM received and produced them (Chat's own
  `prompt_token_ids` must agree, and are checked).

For every turn after the first: does its prompt start with the previous prompt, and do the
previous turn's generated ids follow it unchanged? Differing tokens are the generated ids
that are not in the next prompt at their place (a longest-matching-blocks diff).
"""

from __future__ import annotations

import difflib
import itertools
import json
import time
from typing import Any

import httpx

from bench.prepare import CODEX_REQUEST

Turn = tuple[list[int], list[int]]  # (prompt ids, generated ids)
MAX_TOKENS = 24


def run(client: httpx.Client, vllm_url: str, gateway_url: str, model: str, *, turns: int,
        tokenizer: Any = None) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for api, rollout in (("chat", _chat), ("responses", _responses)):
        results[api] = {}
        for name, url in (("vllm", vllm_url), ("gateway", gateway_url)):
            rollout_id = f"versus-{api}-{time.time_ns():x}" if name == "gateway" else None
            own = rollout(client, url, model, turns, rollout_id)
            ids = _exported(client, gateway_url, rollout_id) if rollout_id else own
            results[api][name] = {**diff(ids, tokenizer), **({"export_matches_responses": ids == own}
                                                             if rollout_id and api == "chat" else {})}
    return results


def diff(turns: list[Turn], tokenizer: Any = None) -> dict[str, Any]:
    """How each later prompt differs from the previous prompt + what the model generated."""
    differing_turns = differing_tokens = generated = prefix_breaks = 0
    example = None
    for (prompt, output), (later, _) in itertools.pairwise(turns):
        generated += len(output)
        kept = later[len(prompt):len(prompt) + len(output)]
        broke = later[:len(prompt)] != prompt
        prefix_breaks += broke
        if kept == output and not broke:
            continue
        differing_turns += 1
        matcher = difflib.SequenceMatcher(None, output, later[len(prompt):len(prompt) + len(output) + 8],
                                          autojunk=False)
        lost = len(output) - sum(block.size for block in matcher.get_matching_blocks())
        differing_tokens += lost
        if example is None and tokenizer is not None and lost:
            example = _example(matcher, output, later[len(prompt):], tokenizer)
    return {"turns_checked": max(len(turns) - 1, 0), "turns_differing": differing_turns,
            "generated_tokens": generated, "tokens_differing": differing_tokens, "prefix_breaks": prefix_breaks,
            "example": example}


def _example(matcher: difflib.SequenceMatcher, output: list[int], later: list[int], tokenizer: Any) -> dict[str, Any]:
    """The first replaced stretch: what the model generated, what the next prompt has instead."""
    special = set(tokenizer.all_special_ids)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag != "equal":
            instead = later[b0:b1]  # up to the template's own tokens that close the turn
            instead = instead[:next((i for i, t in enumerate(instead) if t in special), len(instead))]
            return {"generated": [tokenizer.decode([t]) for t in output[a0:a1][:8]],
                    "next_prompt": [tokenizer.decode([t]) for t in instead[:8]]}
    return {}


def _post(client: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(url, json=body)
    if response.status_code != 200:
        raise RuntimeError(f"{url}: {response.status_code} {response.text[:2000]}")
    return response.json()


def _chat(client: httpx.Client, url: str, model: str, turns: int, rollout_id: str | None) -> list[Turn]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful agent."},
                                      {"role": "user", "content": "Find the failing test and fix it."}]
    ids: list[Turn] = []
    for step in range(turns):
        body = {"model": model, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 1.0,
                "seed": 1000 + step, "return_token_ids": True, **({"rollout_id": rollout_id} if rollout_id else {})}
        answer = _post(client, url + "/v1/chat/completions", body)
        choice = answer["choices"][0]
        ids.append((answer["prompt_token_ids"], choice["token_ids"]))
        message = {key: value for key, value in choice["message"].items()
                   if key in ("role", "content", "reasoning", "reasoning_content", "tool_calls") and value}
        messages += [{"role": "assistant", "content": "", **message}, {"role": "user", "content": f"Go on ({step})."}]
    return ids


def _responses(client: httpx.Client, url: str, model: str, turns: int, rollout_id: str | None) -> list[Turn]:
    codex = json.loads(CODEX_REQUEST.read_text())["body"]
    history: list[dict[str, Any]] = list(codex["input"][:4])
    tools = [tool for tool in codex["tools"] if tool.get("type") == "function"]
    ids: list[Turn] = []
    for step in range(turns):
        body = {"model": model, "input": history, "tools": tools, "max_output_tokens": MAX_TOKENS,
                "temperature": 1.0, "store": False,
                **({"rollout_id": rollout_id} if rollout_id else {"enable_response_messages": True})}
        answer = _post(client, url + "/v1/responses", body)
        if rollout_id is None:
            ids.append(([t for m in answer["input_messages"] for t in m["tokens"]],
                        [t for m in answer["output_messages"] for t in m["tokens"]]))
        history += [_echoed(item) for item in answer["output"]]
        history.append({"type": "message", "role": "user", "content": f"Go on ({step})."})
    return ids


def _echoed(item: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in item.items() if value is not None}


def _exported(client: httpx.Client, gateway_url: str, rollout_id: str) -> list[Turn]:
    """Each call's prompt and generation from the gateway's trajectory (its segment's start on)."""
    export = client.get(f"{gateway_url}/v1/rollouts/{rollout_id}").raise_for_status().json()
    tokens, segments = export["token_ids"], export["segments"]
    starts = {index: segment["start"] for index, segment in enumerate(segments)}
    return [(tokens[starts[turn["segment"]]:turn["prompt_end"]], tokens[turn["prompt_end"]:turn["end"]])
            for turn in export["turns"]]

