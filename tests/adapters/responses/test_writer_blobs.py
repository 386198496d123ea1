"""The writer closes every item before it adds the next, as OpenAI streams them; the turn's
first reasoning item names the turn in its blob (the session store keeps the turn's ids
under that name), later ones carry their text alone."""

import pytest

from gateway.adapters import reasoning_blob
from gateway.adapters.responses.events import ResponseWriter
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted


@pytest.fixture(autouse=True)
def secret(monkeypatch):
    monkeypatch.setattr(reasoning_blob, "_key", reasoning_blob._key)
    reasoning_blob.use_secret("writer")


def stream(writer: ResponseWriter) -> list[dict]:
    events = [ItemStarted(0, "text", channel="commentary"), ItemDone(0, "Checking."),
              ItemStarted(1, "reasoning"), ItemDelta(1, "Look."), ItemDone(1, "Look."),
              ItemStarted(2, "tool_call", name="read_file", call_id="call_1"), ItemDelta(2, "{}"), ItemDone(2, "{}"),
              ItemStarted(3, "reasoning"), ItemDone(3, "Again.")]
    return [event for parsed in events for event in writer.on_parse_event(parsed)]


def test_each_item_is_done_before_the_next_is_added():
    writer = ResponseWriter(response_id="resp_1", model="m", echo={})
    events = stream(writer)
    opened = [(e["type"].rsplit(".", 1)[1], e["output_index"]) for e in events if e["type"].startswith(
        "response.output_item.")]
    assert opened == [("added", 0), ("done", 0), ("added", 1), ("done", 1), ("added", 2), ("done", 2),
                      ("added", 3), ("done", 3)]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_the_first_reasoning_item_names_the_turn():
    writer = ResponseWriter(response_id="resp_1", model="m", echo={})
    events = stream(writer)
    first, second = [e["item"] for e in events if e["type"] == "response.output_item.done"
                     and e["item"]["type"] == "reasoning"]
    assert reasoning_blob.unseal(first["encrypted_content"]) == reasoning_blob.Sealed("Look.", None, "resp_1")
    assert reasoning_blob.unseal(second["encrypted_content"]) == reasoning_blob.Sealed("Again.", None)
    assert writer.output[1]["encrypted_content"] == first["encrypted_content"]  # the final output too
