"""The real Codex CLI with an API key (its provider's `env_key`): the key opens the
WebSocket handshake and every request of a tool turn; a wrong key fails the run with the
gateway's 401 and reaches no replica."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.codex.harness import GENERATE, Traffic, answer_ids, codex_exec, recorded_gateway
from tests.codex.test_codex_cli import assert_tool_turn, tool_call
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.qwen3_tokens import IM_END

pytestmark = pytest.mark.codex

KEY = "sk-codex-tenant"


@pytest.fixture
def stack(qwen_tokenizer_dir, monkeypatch) -> Iterator[tuple[FakeVLLM, str, Traffic]]:
    with recorded_gateway(monkeypatch, qwen_tokenizer_dir, served_model_name="tiny-qwen3", api_keys=[KEY]) as r:
        yield r.fake, r.url, r.traffic


def test_codex_with_an_api_key_over_websocket(stack, codex_bin, tokenizer, tmp_path):
    fake, url, traffic = stack
    call = tool_call(tokenizer, {"cmd": "echo hi > out.txt"})
    (tmp_path / "right").mkdir()
    (tmp_path / "wrong").mkdir()
    fake.queue(Script(call, stop_reason=IM_END), Script(answer_ids(tokenizer, "All done."), stop_reason=IM_END))
    run, work = codex_exec(codex_bin, url, tmp_path / "right", "Write hi to out.txt", websockets=True, api_key=KEY)
    assert_tool_turn(fake, traffic, run, work, call)
    assert [kind for kind, path in traffic.connections if path == "/v1/responses"] == ["websocket"]
    fake.reset()
    run, _ = codex_exec(codex_bin, url, tmp_path / "wrong", "Say hello", api_key="sk-wrong", timeout=90)
    assert run.returncode == 1
    assert any("401" in error or "API key" in error for error in run.errors()), run.errors()
    assert fake.bodies(GENERATE) == []
