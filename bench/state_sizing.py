"""`python -m bench.state_sizing`: what the shared state costs in Redis memory.

Writes through the gateway's own backend (gateway/store/redis/backend.py) into a private
`redis-server` on loopback and asks Redis what each key takes (`MEMORY USAGE … SAMPLES 0`,
allocator rounding included):

- a session of 128k tokens written at once (a process that took over a long session), and
  the same grown turn by turn, 600 tokens a turn (a tool output and the model's answer), as a
  Codex session grows: Redis grows an appended string with slack (up to 1 MB more), so a log
  built by appends can take more than its tokens;
- sessions of 1k, 16k and 128k tokens (per-session overhead against bytes per token);
- a stored response (`store: true`) of 16k tokens;
- an RL rollout of 32 calls, 1k prompt + 1k generated tokens each (tokens, loss mask,
  logprobs and one JSON record per call).

Writes `bench/results/state-sizing.json`; docs/scaling.md's sizing table comes from it.
"""

from __future__ import annotations

import asyncio
import json
import platform
import sys
from pathlib import Path
from typing import Any

import redis

from gateway.core.conversation import Conversation, Message
from gateway.store.backend import open_store
from gateway.store.responses import CachedResponse, ResponseStore
from gateway.store.rollouts import RolloutStore
from gateway.store.sessions import Session, SessionStore
from gateway.tokenfix.record import TurnRecord
from gateway.tokenfix.state import TokenState

GROWTH = 600
HISTORY = Conversation(items=[Message(role="user", text="hi")])
RESULTS = Path(__file__).parent / "results" / "state-sizing.json"


def _tokens(n: int) -> list[int]:
    return [(i * 7919) % 151_000 for i in range(n)]


def _state(tokens: list[int]) -> TokenState:
    return TokenState.build(HISTORY, list(HISTORY.items), tokens[:-1], tokens[-1:], {151645})


def _usage(client: redis.Redis, pattern: str) -> tuple[int, int]:
    """Bytes and keys matching `pattern`, as Redis counts them."""
    keys = list(client.scan_iter(match=pattern, count=1000))
    return sum(client.memory_usage(key, samples=0) or 0 for key in keys), len(keys)


async def measure(url: str) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    results: dict[str, Any] = {}
    store = open_store(url, SessionStore(max_tokens=10**9), ResponseStore(), RolloutStore(max_tokens=10**9))
    try:
        for n in (1_000, 16_000, 128_000):
            await store.put_session(f"at-once-{n}", Session(_state(_tokens(n))))
            used, keys = _usage(client, f"gw:s:{{at-once-{n}}}*")
            results[f"session_{n // 1000}k_at_once"] = {"tokens": n, "bytes": used, "keys": keys,
                                                         "bytes_per_token": round(used / n, 2)}
        tokens = _tokens(GROWTH)
        await store.put_session("grown", Session(_state(tokens)))
        while len(tokens) < 128_000:
            tokens = tokens + _tokens(GROWTH)
            await store.put_session("grown", Session(_state(tokens)))
        used, keys = _usage(client, "gw:s:{grown}*")
        results["session_128k_grown"] = {"tokens": len(tokens), "bytes": used, "keys": keys,
                                         "bytes_per_token": round(used / len(tokens), 2)}

        response = _state(_tokens(16_000))
        await store.put_response(CachedResponse("resp_sizing", HISTORY, response))
        used, keys = _usage(client, "gw:r:resp_sizing")
        results["response_16k"] = {"tokens": 16_000, "bytes": used, "keys": keys,
                                   "bytes_per_token": round(used / 16_000, 2)}

        prompt: list[int] = []
        for call in range(32):
            pending = await store.begin_rollout("episode", None)
            prompt = [*prompt, *_tokens(1000)]
            output = _tokens(1000)
            turn = TurnRecord(request_id=f"gw_{call}", model="m", conversation=Conversation([]), prompt_ids=prompt,
                              output_ids=output, logprobs=[-0.5] * len(output), finish_reason="stop",
                              spliced=pending.prefix is not None, prefix=pending.prefix)
            state = TokenState.build(Conversation([]), [], prompt, output, {151645})
            await store.commit_rollout(pending, turn, state)
            prompt = [*prompt, *output]
        used, keys = _usage(client, "gw:ro:{episode}*")
        results["rollout_32_calls"] = {"tokens": len(prompt), "generated": 32_000, "bytes": used, "keys": keys,
                                       "bytes_per_token": round(used / len(prompt), 2)}
    finally:
        await store.close()
        client.close()
    return results


def main() -> None:
    from tests.support.redis_server import RedisServer  # a private redis-server, stopped at the end

    with RedisServer() as server:
        version = server.command("INFO", "server")["redis_version"]
        results = asyncio.run(measure(server.url))
    report = {"machine": platform.node(), "python": sys.version.split()[0], "redis": version, "results": results}
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    for name, figures in results.items():
        print(f"{name:24} {figures['tokens']:>8} tokens {figures['bytes']:>10} bytes "
              f"{figures['bytes_per_token']:>6} B/token  ({figures['keys']} keys)")


if __name__ == "__main__":
    main()
