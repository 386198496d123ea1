"""The exchange owns a turn from start to end (gateway/pipeline/exchange.py): against a scripted
replica, what a writer sees and when the one commit happens; however a turn is left it is closed
(the replica's work aborted), including a background response cancelled while its state is
being stored; and what the exchange looks up for a Responses builder before the builder
finishes its request."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.core.conversation import Conversation, Message
from gateway.core.errors import APIError
from gateway.core.sampling import SamplingOptions
from gateway.core.settings import Settings
from gateway.pipeline import exchange, session
from gateway.pipeline.request import Found, Named, TurnRequest
from gateway.server._event_log import EventLog
from gateway.server.app import build_runtime
from gateway.server.routes import stored_responses
from gateway.store.responses import CachedResponse, ResponseCache
from tests.support.fake_vllm import FakeVLLM, Script
from tests.support.response_turns import scenario
from tests.support.waiting import wait_for

TOKENS = [9707, 1879, 151645]  # "Hello world" then <|im_end|>


def _scenario(model_dir: str, scripts: list[Script], drive: Any, **body: Any) -> tuple[Any, FakeVLLM]:
    return scenario(model_dir, scripts, drive, store=True, **body)


class _Log:
    """A writer that notes each call, and what the store held when the last events went out."""

    keeps = True

    def __init__(self, runtime: Any, response_id: str) -> None:
        self.calls: list[str] = []
        self._runtime, self._response_id = runtime, response_id
        self.stored_before_end: bool | None = None

    def started(self, turn):
        self.calls.append("started")

    def events(self, events):
        self.calls.append("events")

    def answer(self, turn):
        self.calls.append("answer")
        return {"id": self._response_id, "status": "completed"}

    def ended(self, turn):
        self.calls.append("ended")
        return self._check_stored()

    async def _check_stored(self) -> None:
        self.stored_before_end = await session.stored(self._runtime, self._response_id) is not None

    def failed(self, turn, error):
        self.calls.append(f"failed:{error.code}")


class _Builder:
    """A builder that names `named` and notes what the exchange asks of it."""

    def __init__(self, named: Named, session_key: str | None = None) -> None:
        self.session_key, self._named = session_key, named
        self.calls: list[str] = []
        self.found: Found | None = None

    def resent(self, found):
        self.calls.append("resent")
        return False

    def named(self) -> Named:
        self.calls.append("named")
        return self._named

    async def request(self, found: Found):
        self.calls.append("request")
        self.found = found
        return TurnRequest(Conversation(items=[Message(role="user", text="hi")]), SamplingOptions()), None


def test_the_exchange_looks_up_what_a_builder_names_before_the_builder_finishes_its_request(qwen_tokenizer_dir):
    """One call prepares a Responses turn: the exchange looks up the session a body may resend (none
    here: the builder is not asked to read it), then what the body names, and hands the builder
    what it found; an unknown conversation is the exchange's 404, before the builder reads on."""
    runtime = build_runtime(Settings(model=str(qwen_tokenizer_dir), upstreams=["http://127.0.0.1:9"]))
    earlier = CachedResponse("resp_1", Conversation(items=[Message(role="user", text="before")]), None)
    cache = ResponseCache()
    cache.put(None, earlier)

    async def prepare() -> tuple[_Builder, _Builder, _Builder, APIError]:
        previous = _Builder(Named(previous_response_id="resp_1", cache=cache), session_key="unknown-key")
        turn = await exchange.prepare_built(runtime, previous)
        assert turn.request.conversation.items == [Message(role="user", text="hi")]
        gone = _Builder(Named(previous_response_id="resp_2", cache=cache))
        await exchange.prepare_built(runtime, gone)
        missing = _Builder(Named(conversation_id="conv_missing"))
        with pytest.raises(APIError) as unknown:
            await exchange.prepare_built(runtime, missing)
        return previous, gone, missing, unknown.value

    previous, gone, missing, unknown = asyncio.run(prepare())
    assert previous.calls == ["named", "request"] and previous.found == Found(previous=earlier)
    assert gone.calls == ["named", "request"] and gone.found == Found()  # the builder's 400 to raise
    assert missing.calls == ["named"] and (unknown.status, unknown.code) == (404, "conversation_not_found")


def test_a_finished_turn_is_committed_once_before_its_last_events(qwen_tokenizer_dir):
    async def drive(runtime, made):
        log = _Log(runtime, made.writer.response_id)
        await exchange.run(made.turn, log)
        return log, made.turn

    (log, turn), _ = _scenario(str(qwen_tokenizer_dir), [Script(TOKENS)], drive)
    assert log.calls[0] == "started" and log.calls[-2:] == ["answer", "ended"]
    assert set(log.calls[1:-2]) == {"events"}
    assert log.stored_before_end is True  # a client continuing at once finds it
    assert turn.record.output_ids == TOKENS and turn._stream.connection is None  # closed


def test_a_turn_failing_mid_stream_is_forgotten_and_closed(qwen_tokenizer_dir):
    async def drive(runtime, made):
        log = _Log(runtime, made.writer.response_id)
        await exchange.run(made.turn, log)
        return log, await session.stored(runtime, made.writer.response_id), made.turn

    (log, stored, turn), _ = _scenario(str(qwen_tokenizer_dir), [Script(TOKENS * 5, error_after=2)], drive)
    assert log.calls[0] == "started" and log.calls[-1].startswith("failed:")
    assert "answer" not in log.calls and "ended" not in log.calls
    assert stored is None  # nothing of a failed turn is kept
    assert turn.record.ended_early == "failed" and turn._stream.connection is None


def test_a_failure_before_the_start_is_the_writers_to_answer(qwen_tokenizer_dir):
    """A replica that refuses the prompt: nothing was written, and the JSON writer raises it."""
    async def drive(runtime, made):
        output = made.output()
        with pytest.raises(APIError) as refused:
            await exchange.run(made.turn, output)
        return refused.value, output.last

    (error, last), _ = _scenario(str(qwen_tokenizer_dir), [Script(TOKENS, status=400)], drive)
    assert error.status == 400 and last is None


def test_a_background_response_cancelled_while_its_state_is_stored_leaves_no_open_turn(qwen_tokenizer_dir,
                                                                                     monkeypatch):
    """The cancel lands inside the `in_progress` store write that follows the replica's
    acceptance: the turn is closed and the replica's work aborted, and the response is stored
    as cancelled."""
    async def drive(runtime, made):
        writing, release = asyncio.Event(), asyncio.Event()
        store_snapshot = session.store_snapshot

        async def slow_snapshot(runtime_, request, response):
            if response["status"] == "in_progress":
                writing.set()
                await release.wait()  # a store that is slow to answer
            await store_snapshot(runtime_, request, response)

        monkeypatch.setattr(session, "store_snapshot", slow_snapshot)
        output = stored_responses.Background(made)
        output.log = EventLog()
        admitted = await exchange.queue(made.turn, output)
        task = asyncio.create_task(stored_responses._background(made, output, admitted))
        await writing.wait()
        assert made.turn._stream is not None and made.turn._stream.connection is not None  # generating
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        found = await session.stored(runtime, made.writer.response_id)
        return made.turn, found.response["status"], runtime.pool.replicas[0]

    (turn, status, replica), fake = _scenario(str(qwen_tokenizer_dir), [Script(TOKENS * 50, stall_after=3)], drive,
                                              background=True)
    assert status == "cancelled"
    assert turn._stream.connection is None and replica.inflight == 0
    wait_for(lambda: len(fake.disconnected) == 1, "the generation aborted")
