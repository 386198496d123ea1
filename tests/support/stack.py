"""The protocol tests' stack: the real gateway in front of scripted fake vLLM replicas.

    with fake_stack(qwen_tokenizer_dir, served_model_name="tiny-qwen3") as stack:
        stack.fake.queue(Script([...]))
        stack.client().responses.create(...)

Keyword arguments are `Settings` fields; `replicas` starts that many fakes (the first is
`stack.fake`), `fake` holds `FakeVLLM` options shared by all of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

from gateway.core.settings import Settings
from gateway.pipeline.runtime import Runtime
from gateway.server.app import build_runtime
from tests.support.fake_vllm import FakeVLLM
from tests.support.gateway_server import running_gateway


@dataclass
class Stack:
    fakes: list[FakeVLLM]
    url: str
    runtime: Runtime

    @property
    def fake(self) -> FakeVLLM:
        return self.fakes[0]

    def client(self, **options: Any) -> openai.OpenAI:
        """The real openai SDK pointed at the gateway (no retries: a failure shows)."""
        return openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0, **options)

    def reset(self) -> None:
        for fake in self.fakes:
            fake.reset()


@contextmanager
def fake_stack(model_dir: Path | str, *, replicas: int = 1, fake: dict[str, Any] | None = None,
               roles: Sequence[str] = (), **settings: Any) -> Iterator[Stack]:
    """`roles`: the fakes' roles in prefill/decode disaggregation, in order ("prefill", "decode",
    "both"), one replica each (`replicas` is then their number)."""
    with ExitStack() as started:
        fakes = [started.enter_context(FakeVLLM(**(fake or {}))) for _ in range(len(roles) or replicas)]
        upstreams = [f"{role}={f.url}" for role, f in zip(roles, fakes, strict=True)] if roles else \
            [f.url for f in fakes]
        config = Settings(model=str(model_dir), upstreams=upstreams, **settings)
        runtime = build_runtime(config)
        url = started.enter_context(running_gateway(config, runtime))
        yield Stack(fakes, url, runtime)


@contextmanager
def tenants_stack(model_dir: Path | str, tenants: dict[str, str], state: str, key_dir: Path,
                  **options: Any) -> Iterator[Stack]:
    """`fake_stack` whose clients are the `tenants` (API key → tenant, in a key file under
    `key_dir`), its state in process (`state` "memory") or in a real redis-server ("redis")."""
    from tests.support.redis_server import RedisServer

    keys = key_dir / "keys"
    keys.write_text("".join(f"{key} {tenant}\n" for key, tenant in tenants.items()))
    with ExitStack() as started:
        shared = {"state_url": started.enter_context(RedisServer()).url} if state == "redis" else {}
        yield started.enter_context(fake_stack(model_dir, api_key_file=str(keys), **shared, **options))
