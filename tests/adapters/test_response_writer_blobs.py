"""The writer seals the whole generation's ids with a turn's first reasoning item: the
`output_item.done` events from that item on wait for the end, in output order."""

import pytest

from gateway.adapters import reasoning_blob
from gateway.adapters.responses_events import ResponseWriter
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted


@pytest.fixture(autouse=True)
def secret(monkeypatch):
    monkeypatch.setattr(reasoning_blob, "_key", reasoning_blob._key)
    reasoning_blob.use_secret("writer")


def stream(writer: ResponseWriter) -> list[dict]:
    events = [ItemStarted(0, "text", channel="commentary"), ItemDone(0, "Checking."),
              ItemStarted(1, "reasoning"), ItemDelta(1, "Look."), ItemDone(1, "Look."),
              ItemStarted(2, "tool_call", name="read_file", call_id="call_1"), ItemDelta(2, "{}"), ItemDone(2, "{}")]
    return [event for parsed in events for event in writer.on_parse_event(parsed)]


def test_done_events_from_the_first_reasoning_item_wait_for_the_generated_ids():
    writer = ResponseWriter(response_id="resp_1", model="m", echo={})
    during = stream(writer)
    assert [e["output_index"] for e in during if e["type"] == "response.output_item.done"] == [0]  # before it
    assert "response.function_call_arguments.delta" in [e["type"] for e in during]  # deltas still stream
    after = writer.finish([5, 6, 7])
    assert [(e["type"], e["output_index"]) for e in after] == [("response.output_item.done", 1),
                                                               ("response.output_item.done", 2)]
    sealed = reasoning_blob.unseal(after[0]["item"]["encrypted_content"])
    assert sealed.text == "Look." and list(sealed.token_ids) == [5, 6, 7]
    numbers = [e["sequence_number"] for e in during + after]
    assert numbers == sorted(numbers)
    assert writer.output[1]["encrypted_content"] == after[0]["item"]["encrypted_content"]  # the final output too


def test_an_unfinished_generation_seals_the_text_alone():
    writer = ResponseWriter(response_id="resp_1", model="m", echo={})
    stream(writer)
    [reasoning, _] = writer.finish(None)
    assert reasoning_blob.unseal(reasoning["item"]["encrypted_content"]) == reasoning_blob.Sealed("Look.", None)
