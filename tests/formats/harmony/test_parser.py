"""HarmonyFormat.parser() over real harmony completions, chunked every way, and over garbage."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_harmony import Conversation as HConversation
from openai_harmony import Message as HMessage
from openai_harmony import RenderConversationConfig, Role

from gateway.formats.base import ItemDelta, ItemDone, ItemStarted, ParseEvent
from gateway.formats.harmony.format import HarmonyFormat, load_harmony_format

START, CHANNEL, MESSAGE, END, CALL, CONSTRAIN, RETURN, EOT = (
    200006, 200005, 200008, 200007, 200012, 200003, 200002, 199999)
ASSISTANT = 173781


@pytest.fixture(scope="module")
def harmony(o200k_dir: Path) -> HarmonyFormat:
    return load_harmony_format(start_date="2025-08-05")


def assistant(text: str, channel: str) -> HMessage:
    return HMessage.from_role_and_content(Role.ASSISTANT, text).with_channel(channel)


def completion(harmony: HarmonyFormat, *messages: HMessage, tail: list[int] = ()) -> list[int]:
    """What gpt-oss generates after the prompt's `<|start|>assistant`: rendered by openai-harmony
    (the last final message ends with <|return|>), plus optional raw tail tokens."""
    ids = harmony.encoding.render_conversation_for_training(
        HConversation.from_messages(list(messages)), RenderConversationConfig(auto_drop_analysis=False))
    ids += tail
    assert ids[:2] == [START, ASSISTANT]
    return ids[2:]


def model_call(harmony: HarmonyFormat, name: str, arguments: str) -> list[int]:
    enc = harmony.encoding.encode
    return [START, ASSISTANT, CHANNEL, *enc(f"commentary to=functions.{name} "), CONSTRAIN, *enc("json"), MESSAGE,
            *enc(arguments), CALL]


def parse(harmony: HarmonyFormat, ids: list[int], chunks: list[int] | None = None) -> list[ParseEvent]:
    """Feed `ids` one token at a time, or in chunks of the given sizes; then finish()."""
    parser = harmony.parser()
    events: list[ParseEvent] = []
    position = 0
    for size in chunks if chunks is not None else [1] * len(ids):
        events += parser.feed(ids[position:position + size])
        position += size
    events += parser.feed(ids[position:])
    return events + parser.finish()


def items(events: list[ParseEvent]) -> list[tuple]:
    """(kind, name, channel, text) per item, checking the event contract on the way."""
    started: dict[int, ItemStarted] = {}
    deltas: dict[int, list[str]] = {}
    done: dict[int, str] = {}
    for event in events:
        if isinstance(event, ItemStarted):
            assert event.index == len(started), "indices start at 0 and increase by one"
            assert all(index in done for index in started), "one item at a time"
            started[event.index] = event
            deltas[event.index] = []
        elif isinstance(event, ItemDelta):
            assert event.index in started and event.index not in done
            assert event.text
            deltas[event.index].append(event.text)
        else:
            assert isinstance(event, ItemDone)
            assert event.index in started and event.index not in done, "exactly one ItemDone per item"
            assert event.text == "".join(deltas[event.index])
            done[event.index] = event.text
    assert done.keys() == started.keys(), "every started item is done"
    return [(s.kind, s.name, s.channel, done[i]) for i, s in started.items()]


REASONING = "The user asks for the weather in Paris. Need to call get_weather. 🦜 ünïcode"
ARGUMENTS = '{"city":"Paris","days":[1,2]}'
ANSWER = "It is 20 °C and sunny in Paris — enjoy! 日本語"


def tool_call_completion(harmony: HarmonyFormat) -> list[int]:
    return completion(harmony, assistant(REASONING, "analysis"), tail=model_call(harmony, "get_weather", ARGUMENTS))


def final_completion(harmony: HarmonyFormat) -> list[int]:
    return completion(harmony, assistant(REASONING, "analysis"), assistant(ANSWER, "final"))


def test_reasoning_then_tool_call(harmony: HarmonyFormat) -> None:
    ids = tool_call_completion(harmony)
    assert ids[-1] == CALL
    events = parse(harmony, ids)
    assert events[0] == ItemStarted(0, "reasoning")
    assert ItemStarted(1, "tool_call", name="get_weather") in events
    assert items(events) == [("reasoning", None, None, REASONING), ("tool_call", "get_weather", None, ARGUMENTS)]
    # Arguments stream as deltas before the item is done.
    assert next(e.text for e in events if isinstance(e, ItemDelta) and e.index == 1) == '{"'


def test_reasoning_then_final_answer(harmony: HarmonyFormat) -> None:
    ids = final_completion(harmony)
    assert ids[-1] == RETURN
    parser = harmony.parser()
    events = parser.feed(ids)
    assert parser.finish() == []  # <|return|> closed everything
    assert items(events) == [("reasoning", None, None, REASONING), ("text", None, "final", ANSWER)]


def test_preamble_then_call_in_harmony_s_own_header_order(harmony: HarmonyFormat) -> None:
    call = (assistant(ARGUMENTS, "commentary").with_recipient("functions.exec_command")
            .with_content_type("<|constrain|>json"))
    ids = completion(harmony, assistant("Let me check the files.", "commentary"), call)
    assert items(parse(harmony, ids)) == [("text", None, "commentary", "Let me check the files."),
                                          ("tool_call", "exec_command", None, ARGUMENTS)]


def test_call_without_constrain_token(harmony: HarmonyFormat) -> None:
    enc = harmony.encoding.encode
    ids = [CHANNEL, *enc("commentary to=functions.get_weather json"), MESSAGE, *enc(ARGUMENTS), CALL]
    assert items(parse(harmony, ids)) == [("tool_call", "get_weather", None, ARGUMENTS)]


def completions(harmony: HarmonyFormat) -> list[list[int]]:
    enc = harmony.encoding.encode
    return [
        tool_call_completion(harmony),
        final_completion(harmony),
        [CHANNEL, *enc("final"), MESSAGE, *enc("cut off mid-sent")],
        [*enc("no header at all"), END, *enc("text after"), START, ASSISTANT, CHANNEL, *enc("final"), MESSAGE,
         *enc("ok"), RETURN],
    ]


@settings(max_examples=150, deadline=None)
@given(which=st.integers(0, 3), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_events_do_not_depend_on_chunking(harmony: HarmonyFormat, which: int, cuts: list[int]) -> None:
    ids = completions(harmony)[which]
    points = sorted({min(c, len(ids)) for c in cuts})
    sizes = [b - a for a, b in zip([0, *points], points)]
    assert parse(harmony, ids, sizes) == parse(harmony, ids)


def test_unsupported_recipient_degrades_to_text(harmony: HarmonyFormat, caplog: pytest.LogCaptureFixture) -> None:
    enc = harmony.encoding.encode
    ids = [CHANNEL, *enc("analysis to=browser.search code"), MESSAGE, *enc('{"query":"paris weather"}'), CALL]
    with caplog.at_level(logging.WARNING, logger="gateway.formats.harmony._parser"):
        result = items(parse(harmony, ids))
    assert result == [("text", None, None, '{"query":"paris weather"}')]
    assert "browser.search" in caplog.text
    python = [CHANNEL, *enc("analysis to=python"), MESSAGE, *enc("print(1)"), CALL]
    assert items(parse(harmony, python)) == [("text", None, None, "print(1)")]


def test_text_where_a_message_should_start_becomes_text_and_parsing_resumes(harmony: HarmonyFormat) -> None:
    enc = harmony.encoding.encode
    ids = [CHANNEL, *enc("analysis"), MESSAGE, *enc("thinking"), END,
           *enc("stray words"), CHANNEL, END,
           START, ASSISTANT, CHANNEL, *enc("final"), MESSAGE, *enc("Answer"), RETURN]
    assert items(parse(harmony, ids)) == [("reasoning", None, None, "thinking"),
                                          ("text", None, None, "stray words<|channel|>"),
                                          ("text", None, "final", "Answer")]


def test_rejected_header_is_passed_on_as_text(harmony: HarmonyFormat) -> None:
    enc = harmony.encoding.encode
    ids = [CHANNEL, MESSAGE, *enc("Hello"), RETURN]  # a channel marker without a channel
    assert items(parse(harmony, ids)) == [("text", None, None, "<|channel|><|message|>Hello")]


def test_generation_cut_inside_content(harmony: HarmonyFormat) -> None:
    ids = final_completion(harmony)[:-6]
    result = items(parse(harmony, ids))
    assert result[0] == ("reasoning", None, None, REASONING)
    assert result[1][:3] == ("text", None, "final") and ANSWER.startswith(result[1][3]) and result[1][3]


def test_generation_cut_inside_a_header(harmony: HarmonyFormat) -> None:
    enc = harmony.encoding.encode
    ids = [CHANNEL, *enc("analysis"), MESSAGE, *enc("hmm"), END, START, ASSISTANT, CHANNEL, *enc("fin")]
    assert items(parse(harmony, ids)) == [("reasoning", None, None, "hmm"),
                                          ("text", None, None, "<|start|>assistant<|channel|>fin")]
    assert parse(harmony, []) == []


def test_end_of_text_closes_without_leaking(harmony: HarmonyFormat) -> None:
    enc = harmony.encoding.encode
    ids = [CHANNEL, *enc("final"), MESSAGE, *enc("Hi there"), EOT]
    assert items(parse(harmony, ids)) == [("text", None, "final", "Hi there")]


def test_unicode_split_across_tokens(harmony: HarmonyFormat) -> None:
    text = "𝔘𝔫𝔦 🦜🦜 ꙮ"
    ids = [CHANNEL, *harmony.encoding.encode("final"), MESSAGE, *harmony.encoding.encode(text), RETURN]
    events = parse(harmony, ids)
    assert items(events) == [("text", None, "final", text)]
    assert all("\ufffd" not in e.text for e in events if isinstance(e, ItemDelta))


SPECIAL = [START, CHANNEL, MESSAGE, END, CALL, CONSTRAIN, RETURN, EOT, 200000, 200018]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_arbitrary_tokens_never_break_the_contract(harmony: HarmonyFormat, data: st.DataObject) -> None:
    enc = harmony.encoding.encode
    words = [*enc("analysis"), *enc("final"), *enc("commentary"), *enc(" to=functions.f"), *enc(" json"),
             *enc("assistant"), *enc("Hello"), *enc("🦜"), 0, 1, 199997]
    ids = data.draw(st.lists(st.sampled_from(SPECIAL + words), max_size=40))
    sizes = data.draw(st.lists(st.integers(1, 5), max_size=10))
    events = parse(harmony, ids, sizes)
    items(events)  # asserts the event contract
    assert all("<|endoftext|>" not in e.text for e in events if isinstance(e, ItemDelta))


def test_decode(harmony: HarmonyFormat) -> None:
    assert harmony.decode([START, ASSISTANT, CHANNEL, *harmony.encoding.encode("final"), MESSAGE]) == (
        "<|start|>assistant<|channel|>final<|message|>")


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, 400), max_size=12))
def test_reasoning_tokens_do_not_depend_on_chunking(harmony: HarmonyFormat, cuts: list[int]) -> None:
    ids = final_completion(harmony)
    points = sorted({min(c, len(ids)) for c in cuts})
    parser = harmony.parser()
    for a, b in zip([0, *points], [*points, len(ids)]):
        parser.feed(ids[a:b])
    analysis = ids[ids.index(MESSAGE) + 1 : ids.index(END) + 1]  # the analysis content and its <|end|>
    assert analysis[:-1] == harmony.encoding.encode(REASONING)
    assert parser.reasoning_tokens == len(analysis)


@settings(max_examples=300, deadline=None)
@given(content=st.lists(st.one_of(st.integers(0, 199_997), st.sampled_from(
    [0, 1, 5, 127, 128, 255, START, CHANNEL, MESSAGE, CONSTRAIN, 200000, 201_087, 210_000])),
    min_size=1, max_size=60))
def test_content_decodes_as_harmony_s_own_parser(harmony: HarmonyFormat, content: list[int]) -> None:
    """Content tokens are decoded by the gateway, not handed to `StreamableParser` (which
    re-encodes every delta): any ids, most of them pieces of UTF-8 characters or invalid
    sequences, markers out of place, an id beyond the vocabulary (after which harmony's parser
    waits for the message's end), give the deltas harmony's own parser gives, token by token."""
    from openai_harmony import StreamableParser

    header = [CHANNEL, *harmony.encoding.encode("final"), MESSAGE]
    own = StreamableParser(harmony.encoding, Role.ASSISTANT)
    for token in header:
        own.process(token)
    expected = []
    for token in content:
        own.process(token)
        expected.append(own.last_content_delta or "")
    parser = harmony.parser()
    parser.feed(header)
    got = []
    for token in content:
        deltas = [e.text for e in parser.feed([token]) if isinstance(e, ItemDelta)]
        got.append("".join(deltas))
    assert got == expected
    done = [e for e in parser.feed([RETURN]) if isinstance(e, ItemDone)]
    assert done[0].text == "".join(expected)
    assert items(parse(harmony, [*header, *content, CHANNEL, RETURN]))  # still in step after the message
