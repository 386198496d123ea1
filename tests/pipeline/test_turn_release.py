"""A finished turn is freed by reference counting alone.

A turn holds its prompt ids (a 100k-token prompt is megabytes as a list), its upstream
stream and the request's trace. A reference cycle through any of them (e.g. a task that
keeps the request's context, whose trace keeps the turn) leaves all that for the cyclic
garbage collector, which may not run for many requests: resident memory then grows with
every request. With the collector off, nothing of a finished turn may survive.
"""

from __future__ import annotations

import gc
import json
import time
import weakref

import httpx
import pytest
import websockets.sync.client

from gateway.core.settings import Settings
from gateway.pipeline import turn as turn_module
from gateway.upstream import replica as replica_module
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.gateway_server import running_gateway
from tests.support.qwen3_tokens import IM_END
from tests.support.waiting import DEADLINE

MODEL = "tiny-qwen3"


@pytest.fixture
def tracked(monkeypatch):
    """Weak references to every Turn and UpstreamStream made while the test runs."""
    made: list[weakref.ref] = []
    for cls in (turn_module.Turn, replica_module.UpstreamStream):
        init = cls.__init__

        def tracking_init(self, *args, __init=init, **kwargs):
            __init(self, *args, **kwargs)
            made.append(weakref.ref(self))

        monkeypatch.setattr(cls, "__init__", tracking_init)
    return made


@pytest.fixture
def no_gc():
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def alive(made: list[weakref.ref]) -> list[str]:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:  # the server thread finishes its cleanup after the response
        survivors = [type(obj).__name__ for ref in made if (obj := ref()) is not None]
        if not survivors:
            return []
        time.sleep(0.05)
    return survivors


def test_turns_are_freed_without_the_cyclic_collector(qwen_tokenizer_dir, tokenizer, tracked, no_gc):
    answer = tokenizer.encode("Hello there", add_special_tokens=False) + [IM_END]
    with FakeVLLM(max_model_len=4096) as fake:
        settings = Settings(model=str(qwen_tokenizer_dir), upstreams=[fake.url], served_model_name=MODEL)
        with running_gateway(settings) as url:
            body = {"model": MODEL, "input": "Hi", "prompt_cache_key": "s", "max_output_tokens": 8}
            for stream in (False, True):
                fake.queue(Script(answer, stop_reason=IM_END))
                response = httpx.post(url + "/v1/responses", json={**body, "stream": stream}, timeout=30)
                assert response.status_code == 200 and "Hello there" in response.text
            fake.queue(Script(answer, stop_reason=IM_END))
            chat = httpx.post(url + "/v1/chat/completions", timeout=30, json={
                "model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": True})
            deltas = [json.loads(line[5:]) for line in chat.text.splitlines() if line.startswith("data: {")]
            assert "".join(d["choices"][0]["delta"].get("content") or "" for d in deltas if d["choices"]) == "Hello there"
            fake.queue(Script(answer, stop_reason=IM_END))
            with websockets.sync.client.connect(url.replace("http", "ws") + "/v1/responses") as socket:
                socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Hi"}))
                while '"response.completed"' not in (frame := socket.recv()):
                    assert json.loads(frame)["type"] != "error", frame
            assert len(tracked) == 8  # four turns, each with its upstream stream
            assert alive(tracked) == []
