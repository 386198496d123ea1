"""A steer stops a turn's output at the exact ids taken so far, except inside a tool call, which
it lets end first and cuts right after (gateway/pipeline/steering.py): fed the outputs gpt-oss
(harmony) and Qwen3 (hermes) write, through the turn's own output (TurnOutput)."""

from __future__ import annotations

from gateway.core.conversation import Conversation, Message, Reasoning, ToolCall
from gateway.pipeline._output import TurnOutput
from gateway.tokenfix.record import TurnRecord
from gateway.upstream.chunks import TokenChunk
from tests.support.qwen3_tokens import END_TOOL_CALL, IM_END, TOOL_CALL, ids

START, CHANNEL, MESSAGE, END, CALL, CONSTRAIN = 200006, 200005, 200008, 200007, 200012, 200003
ASSISTANT = 173781


def output_of(chat_format) -> tuple[TurnRecord, TurnOutput]:
    record = TurnRecord(request_id="r", model="m", conversation=Conversation(items=[]))
    return record, TurnOutput(record, chat_format, False, None)


def test_harmony_steer_waits_for_the_call_header_and_arguments_then_cuts(harmony_format):
    enc = harmony_format.encoding.encode
    analysis = [CHANNEL, *enc("analysis"), MESSAGE, *enc("Check the weather."), END]
    header = [START, ASSISTANT, CHANNEL, *enc("commentary to=functions.get_weather "), CONSTRAIN, *enc("json"),
              MESSAGE]
    call = [*enc('{"city": "Oslo"}'), CALL]
    record, output = output_of(harmony_format)
    output.take(TokenChunk([*analysis, *header[:4]]))
    assert output.steer() is False  # inside the call's header
    output.take(TokenChunk([*header[4:], *call[:2]]))
    assert not output.steered  # inside its arguments
    output.take(TokenChunk([*call[2:], *enc("more")]))
    assert output.steered and record.finish_reason == "steered"
    assert record.output_ids == [*analysis, *header, *call]  # cut right after the call
    output.finish()
    assert record.output_items == [Reasoning(text="Check the weather."),
                                   ToolCall(call_id=record.output_items[1].call_id, name="get_weather",
                                            arguments='{"city": "Oslo"}')]


def test_hermes_steer_in_text_stops_at_once_and_in_a_call_at_its_end(qwen_format, tokenizer):
    record, output = output_of(qwen_format)
    output.take(TokenChunk(ids(tokenizer, "Hello")))
    assert output.steer() is True and record.finish_reason == "steered"
    assert record.output_ids == ids(tokenizer, "Hello")

    record, output = output_of(qwen_format)
    opening = [*ids(tokenizer, "Running."), TOOL_CALL, *ids(tokenizer, '\n{"name": "ls", "arguments": {')]
    closing = [*ids(tokenizer, "}}\n"), END_TOOL_CALL]
    output.take(TokenChunk(opening))
    assert output.steer() is False
    output.take(TokenChunk([*closing, *ids(tokenizer, "More text"), IM_END], finish_reason="stop"))
    assert output.steered and record.finish_reason == "steered" and record.output_ids == [*opening, *closing]
    output.finish()
    assert [type(item) for item in record.output_items] == [Message, ToolCall]


def test_a_turn_that_finished_in_the_read_that_steered_keeps_its_finish(qwen_format, tokenizer):
    record, output = output_of(qwen_format)
    output.take(TokenChunk([TOOL_CALL, *ids(tokenizer, '\n{"name": "ls", "arguments": {')]))
    output.steer()
    output.take(TokenChunk([*ids(tokenizer, "}}\n"), END_TOOL_CALL], finish_reason="stop"))
    assert output.steered and record.finish_reason == "stop"
