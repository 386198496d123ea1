"""`Turn.relay` (push) against a scripted replica: the item events and record of the generation;
what the consumer raises, or what it asked to wait for raises, comes out as it was (a client
gone is not the gateway failing) and the generation is aborted; a parser bug below is the
turn's own clean failure."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway.core.errors import APIError
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.response_turns import scenario
from tests.support.waiting import wait_for

# "Hello world" then <|im_end|>, one token per chunk
TOKENS = [9707, 1879, 151645]


def _run(model_dir: str, scripts: list[Script], drive: Any) -> tuple[Any, FakeVLLM]:
    """`drive(turn)` on a started turn over a fresh runtime; (its result, the fake replica)."""
    async def started(runtime: Any, made: Any) -> Any:
        async with made.turn as turn:
            return await drive(turn)
    return scenario(model_dir, scripts, started, stream=True, store=False)


def test_relay_gives_the_item_events_and_record(qwen_tokenizer_dir):
    async def pushed(turn):
        got = []
        await turn.relay(lambda events: got.extend(events))
        return got, turn.record

    (events, record), _ = _run(str(qwen_tokenizer_dir), [Script(TOKENS)], pushed)
    assert type(events[0]) is ItemStarted and type(events[-1]) is ItemDone
    assert {type(e) for e in events[1:-1]} == {ItemDelta}
    assert "".join(e.text for e in events if type(e) is ItemDelta) == events[-1].text == "Hello world"
    assert record.output_ids == TOKENS
    assert record.finish_reason == "stop" and record.ended_early is None
    assert [item.text for item in record.output_items] == ["Hello world"]


@pytest.mark.parametrize("where", ["sink", "its hold"])
def test_what_the_consumer_raises_comes_out_as_it_was_and_aborts(qwen_tokenizer_dir, caplog, where):
    """A client gone while its events are written: the consumer's own error, not a 500."""
    async def drive(turn):
        async def gone() -> None:
            raise ConnectionResetError("client gone")

        def sink(events):
            if where == "sink":
                raise ConnectionResetError("client gone")
            return gone()
        with pytest.raises(ConnectionResetError, match="client gone"):
            await turn.relay(sink)
        return turn.record

    caplog.set_level(logging.ERROR)
    script = Script(TOKENS * 50, stall_after=3)  # the replica holds the rest back: only an abort ends it
    record, fake = _run(str(qwen_tokenizer_dir), [script], drive)
    assert record.ended_early == "cancelled"
    wait_for(lambda: len(fake.disconnected) == 1, "the generation aborted")
    assert "the turn failed" not in caplog.text


def test_a_parser_bug_is_the_turns_own_clean_failure(qwen_tokenizer_dir, monkeypatch):
    async def drive(turn):
        monkeypatch.setattr(turn.runtime.format, "parser", lambda *a, **k: _Broken())
        with pytest.raises(APIError) as failed:
            await turn.relay(lambda events: None)
        return failed.value, turn.record

    (error, record), _ = _run(str(qwen_tokenizer_dir), [Script(TOKENS)], drive)
    assert error.status == 500 and error.code == "server_error"
    assert record.ended_early == "failed"


class _Broken:
    reasoning_tokens = 0

    def feed(self, ids):
        raise KeyError("parser bug")

    def finish(self):
        return []
