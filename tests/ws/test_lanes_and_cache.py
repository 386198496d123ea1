"""The pieces of WebSocket mode that need no socket: lanes, the response cache, frame checks."""

from __future__ import annotations

import asyncio
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.adapters.responses._continuation import parse_continuation
from gateway.core.conversation import Conversation, Message, ToolCall
from gateway.core.errors import APIError
from gateway.store.responses import CachedResponse, ResponseCache
from gateway.ws._lanes import Lanes
from gateway.ws.request import read_create


class Jobs:
    """A `run` for Lanes whose jobs finish only when the test releases them."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.release: dict[str, asyncio.Event] = {}

    async def run(self, job: str) -> None:
        self.started.append(job)
        await self.release.setdefault(job, asyncio.Event()).wait()
        self.finished.append(job)

    def done(self, job: str) -> None:
        self.release.setdefault(job, asyncio.Event()).set()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_fifo_within_a_lane_parallel_across_lanes():
    jobs = Jobs()
    lanes = Lanes(jobs.run)
    for job, lane in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("d1", None)):
        lanes.submit(lane, job)
    await settle()
    assert jobs.started == ["a1", "b1", "d1"]  # a2 waits for a1
    jobs.done("a2")  # releasing a queued job early changes nothing: the lane is FIFO
    await settle()
    assert jobs.started == ["a1", "b1", "d1"]
    jobs.done("a1")
    await settle()
    assert jobs.finished == ["a1", "a2"] and jobs.started[-1] == "a2"
    await lanes.close()


async def test_running_lanes_and_queue_depth_are_bounded():
    jobs = Jobs()
    lanes = Lanes(jobs.run, max_running=2, max_lanes=3, max_queued=2)
    for lane in ("a", "b", "c"):
        lanes.submit(lane, lane + "1")
    await settle()
    assert jobs.started == ["a1", "b1"]  # c1 waits for a running slot
    with pytest.raises(APIError) as lane_cap:
        lanes.submit("d", "d1")
    lanes.submit("a", "a2")
    with pytest.raises(APIError) as depth:
        lanes.submit("a", "a3")
    assert lane_cap.value.code == depth.value.code == "concurrent_request"
    jobs.done("b1")  # lane b empties: its slot goes to c1 and the lane itself is free again
    await settle()
    assert jobs.started == ["a1", "b1", "c1"]
    lanes.submit("d", "d1")
    await lanes.close()


async def test_close_cancels_running_and_queued_jobs():
    jobs = Jobs()
    lanes = Lanes(jobs.run)
    lanes.submit("a", "a1")
    lanes.submit("a", "a2")
    await settle()
    await lanes.close()
    jobs.done("a1")
    jobs.done("a2")
    await settle()
    assert jobs.started == ["a1"] and jobs.finished == []


def entry(response_id: str) -> CachedResponse:
    return CachedResponse(response_id, Conversation(items=[Message(role="user", text=response_id)]), None)


def test_cache_finds_the_latest_response_of_any_lane_and_bounds_lanes():
    cache = ResponseCache(max_lanes=2)
    cache.put(None, entry("r1"))
    cache.put("b", entry("r2"))
    cache.put(None, entry("r3"))  # replaces r1 on the default lane
    assert cache.find("r1") is None and cache.find("r2").response_id == "r2"
    cache.put("c", entry("r4"))  # a third lane: the least recently answered lane (b) goes
    assert cache.find("r2") is None and cache.find("r3") and cache.find("r4")
    cache.evict(None)
    assert cache.find("r3") is None and cache.find("r4")


@given(st.text(alphabet=string.ascii_letters + string.digits + "_.-", min_size=1, max_size=256))
def test_valid_stream_ids_are_accepted(stream_id):
    assert read_create({"type": "response.create", "stream_id": stream_id}).stream_id == stream_id


@given(st.one_of(st.text(min_size=257, alphabet="ab"), st.just(""),
                 st.text(min_size=1).filter(lambda s: any(c not in string.ascii_letters + string.digits + "_.-"
                                                          for c in s))))
def test_invalid_stream_ids_are_refused(stream_id):
    with pytest.raises(APIError) as error:
        read_create({"type": "response.create", "stream_id": stream_id})
    assert error.value.param == "stream_id"


def test_transport_fields_are_stripped_and_generate_defaults_to_true():
    request = read_create({"type": "response.create", "stream": True, "model": "m", "input": "x",
                           "stream_id": "s"})
    assert request.body == {"model": "m", "input": "x"} and request.generate is True
    assert read_create({"type": "response.create", "generate": False}).generate is False


def test_continuation_appends_to_history_and_inherits_its_context():
    history = Conversation(items=[Message(role="user", text="run it"),
                                  ToolCall(call_id="call_1", name="exec", arguments="{}")],
                           instructions="base", tool_choice="required", reasoning_effort="high")
    previous = CachedResponse("resp_1", history, None)
    body = {"model": "m", "previous_response_id": "resp_1", "input": [
        {"type": "message", "role": "developer", "content": "new rules"},
        {"type": "function_call_output", "call_id": "call_1", "output": "done"}]}
    conversation = parse_continuation(body, previous).conversation
    assert conversation.instructions == "base" and conversation.tool_choice == "required"
    assert conversation.reasoning_effort == "high"
    assert conversation.items[:2] == history.items
    developer, output = conversation.items[2:]
    assert developer == Message(role="developer", text="new rules")  # an item, not the instructions
    assert (output.call_id, output.name, output.output) == ("call_1", "exec", "done")
    explicit = parse_continuation({**body, "instructions": "other", "tool_choice": "auto"}, previous)
    assert explicit.conversation.instructions == "other" and explicit.conversation.tool_choice == "auto"
    assert explicit.echo["instructions"] == "other"
