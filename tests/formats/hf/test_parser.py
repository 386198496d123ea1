"""The Qwen3 output parser: real token ids in, reasoning / text / tool-call items out."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.formats.base import ItemDelta, ItemDone, ItemStarted
from gateway.formats.hf.format import HFChatFormat
from gateway.formats.hf.parser import parse_tool_call
from tests.support.parse_events import items

IM_END, ENDOFTEXT = 151645, 151643
THINK, THINK_END, CALL, CALL_END = 151667, 151668, 151657, 151658

FUNCTION_CALLS = (
    "<think>\nThe user wants weather 🌦 for 東京 and Zürich.\n</think>\n\n"
    "Let me check both.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "東京", "unit": "c"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>'
    "<|im_end|>"
)
FUNCTION_CALL_ITEMS = [
    ("reasoning", None, "The user wants weather 🌦 for 東京 and Zürich."),
    ("text", None, "Let me check both."),
    ("tool_call", "get_weather", '{"city": "東京", "unit": "c"}'),
    ("tool_call", "get_weather", '{"city": "Zürich"}'),
]

def parse(fmt: HFChatFormat, ids: list[int], chunk_sizes=None) -> list[tuple[str, str | None, str]]:
    parser = fmt.parser()
    events = []
    position = 0
    for size in chunk_sizes or [len(ids)]:
        events += parser.feed(ids[position : position + size])
        position += size
    events += parser.feed(ids[position:])
    events += parser.finish()
    return items(events)


def test_reasoning_text_and_two_tool_calls(qwen_format, qwen_tokenizer):
    ids = qwen_tokenizer.encode(FUNCTION_CALLS)
    assert ids.count(CALL) == 2 and ids[0] == THINK
    assert parse(qwen_format, ids) == FUNCTION_CALL_ITEMS
    assert parse(qwen_format, ids, [1] * len(ids)) == FUNCTION_CALL_ITEMS


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk_sizes=st.lists(st.integers(0, 7), max_size=80))
def test_chunking_does_not_change_the_items(qwen_format, qwen_tokenizer, chunk_sizes):
    ids = qwen_tokenizer.encode(FUNCTION_CALLS)
    assert parse(qwen_format, ids, chunk_sizes) == FUNCTION_CALL_ITEMS


def test_multibyte_characters_split_across_tokens(qwen_format, qwen_tokenizer):
    text = "🎉🦄 emoji, 中文字符, ﷽ and ü"
    ids = qwen_tokenizer.encode(text)
    assert len(ids) > len(text.split())  # the emoji take several byte tokens each
    parser = qwen_format.parser()
    deltas = []
    for token_id in ids:
        deltas += [e.text for e in parser.feed([token_id]) if isinstance(e, ItemDelta)]
    parser.finish()
    assert "\ufffd" not in "".join(deltas)
    assert "".join(deltas) == qwen_tokenizer.decode(ids) == text


def test_text_equals_decode_of_the_same_ids(qwen_format, qwen_tokenizer):
    text = "Plain answer with code:\n```py\nprint('hi')  # 🐍\n```\nand a trailing line"
    ids = qwen_tokenizer.encode(text) + [IM_END]
    assert parse(qwen_format, ids, [1] * len(ids)) == [
        ("text", None, qwen_tokenizer.decode(ids, skip_special_tokens=True))
    ]


def test_stop_tokens_produce_no_text(qwen_format, qwen_tokenizer):
    ids = qwen_tokenizer.encode("Done.") + [IM_END, ENDOFTEXT]
    assert parse(qwen_format, ids) == [("text", None, "Done.")]


def test_reasoning_cut_by_length_is_closed_by_finish(qwen_format, qwen_tokenizer):
    ids = qwen_tokenizer.encode("<think>\nStep one. Step two, and then")
    parser = qwen_format.parser()
    events = parser.feed(ids)
    assert isinstance(events[0], ItemStarted) and events[0].kind == "reasoning"
    assert not any(isinstance(e, ItemDone) for e in events)
    assert parser.finish() == [ItemDone(0, "Step one. Step two, and then")]


def test_empty_think_block_makes_no_item(qwen_format, qwen_tokenizer):
    ids = qwen_tokenizer.encode("<think>\n\n</think>\n\nHi!")
    assert parse(qwen_format, ids) == [("text", None, "Hi!")]


def test_string_arguments_and_arguments_as_written(qwen_format, qwen_tokenizer):
    ids = qwen_tokenizer.encode(
        '<tool_call>\n{"name": "a", "arguments": "{\\"x\\": 1}"}\n</tool_call>'
        '<tool_call>\n{"arguments": {"y" : [1,2]}, "name": "b"}\n</tool_call>'
        '<tool_call>\n{"name": "c"}\n</tool_call>'
    )
    assert parse(qwen_format, ids) == [
        ("tool_call", "a", '{"x": 1}'),
        ("tool_call", "b", '{"y":[1,2]}'),  # not the last member: compact JSON
        ("tool_call", "c", "{}"),
    ]


def test_malformed_markup_degrades_to_text(qwen_format, qwen_tokenizer):
    ids = qwen_tokenizer.encode(
        "Before.\n<tool_call>\n{not json}\n</tool_call>\n"
        '<tool_call>\n{"arguments": {}}\n</tool_call>'
        "stray </tool_call> and </think> end\n"
        '<tool_call>\n{"name": "cut'
    )
    assert parse(qwen_format, ids) == [
        ("text", None, "Before."),
        ("text", None, "<tool_call>\n{not json}\n</tool_call>"),
        ("text", None, '<tool_call>\n{"arguments": {}}\n</tool_call>'),
        ("text", None, "stray </tool_call> and </think> end"),
        ("text", None, '<tool_call>\n{"name": "cut'),
    ]


def test_markers_inside_reasoning_are_reasoning_text(qwen_format, qwen_tokenizer):
    ids = qwen_tokenizer.encode("<think>maybe <tool_call> or <think>?</think>ok")
    assert parse(qwen_format, ids) == [("reasoning", None, "maybe <tool_call> or <think>?"), ("text", None, "ok")]


def test_template_that_opens_think_in_the_prompt_starts_in_reasoning(qwen_tokenizer):
    import copy

    tokenizer = copy.deepcopy(qwen_tokenizer)
    tokenizer.chat_template = tokenizer.chat_template.replace(
        "{{- '<|im_start|>assistant\\n' }}\n    {%- if enable_thinking", "{{- '<|im_start|>assistant\\n<think>\\n' }}\n    {%- if enable_thinking"
    )
    fmt = HFChatFormat(tokenizer)
    assert fmt.decode(fmt.render(_hi())).endswith("<|im_start|>assistant\n<think>\n")
    ids = qwen_tokenizer.encode("Thinking it over.\n</think>\n\nAnswer.")
    assert THINK not in ids
    assert parse(fmt, ids) == [("reasoning", None, "Thinking it over."), ("text", None, "Answer.")]


def test_enable_thinking_false_starts_in_text(qwen_tokenizer):
    fmt = HFChatFormat(qwen_tokenizer, enable_thinking=False)
    assert fmt.decode(fmt.render(_hi())).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert parse(fmt, qwen_tokenizer.encode("Hi </think> there")) == [("text", None, "Hi </think> there")]


def test_stop_ids_and_turn_terminators(qwen_format, qwen_tokenizer):
    assert qwen_format.stop_token_ids == [IM_END, ENDOFTEXT]
    assert qwen_format.turn_terminators == frozenset({IM_END, ENDOFTEXT})  # either closes the turn
    extra = HFChatFormat(qwen_tokenizer, extra_eos_ids=[ENDOFTEXT, 7])
    assert extra.stop_token_ids == [IM_END, ENDOFTEXT, 7]


def test_load_hf_format_reads_generation_config(qwen_tokenizer_dir, tmp_path):
    import shutil

    from gateway.formats.hf.format import load_hf_format

    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(qwen_tokenizer_dir / name, tmp_path / name)
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [151645, 151643, 99]}')
    fmt = load_hf_format(tmp_path)
    assert fmt.stop_token_ids == [IM_END, ENDOFTEXT, 99]
    assert fmt.render(_hi()) == [151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198]


def test_decode_keeps_special_tokens(qwen_format):
    assert qwen_format.decode([151644, 77091, 198, 9707, IM_END]) == "<|im_start|>assistant\nHello<|im_end|>"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ids=st.lists(st.one_of(st.integers(0, 151935), st.sampled_from([THINK, THINK_END, CALL, CALL_END, IM_END])),
                 max_size=60),
    chunk_sizes=st.lists(st.integers(1, 5), max_size=20),
)
def test_random_ids_never_break_the_contract(qwen_format, ids, chunk_sizes):
    # Random ids, as a random tiny model generates them, including ids past the tokenizer's vocabulary.
    whole = parse(qwen_format, ids)
    assert parse(qwen_format, ids, chunk_sizes) == whole


def test_parse_tool_call_rejects_what_is_not_a_call():
    assert parse_tool_call('{"name": "f", "arguments": {"a": 1}}') == ("f", '{"a": 1}')
    assert parse_tool_call('{"name": "", "arguments": {}}') is None
    assert parse_tool_call('["name", "f"]') is None
    assert parse_tool_call('{"name": "f", "arguments": {"a": 1}} trailing') is None


def _hi():
    from gateway.core.conversation import Conversation, Message

    return Conversation(items=[Message("user", "Hi")])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk_sizes=st.lists(st.integers(0, 7), max_size=80))
def test_reasoning_tokens_do_not_depend_on_chunking(qwen_format, qwen_tokenizer, chunk_sizes):
    ids = qwen_tokenizer.encode(FUNCTION_CALLS)
    reasoning = ids[1 : ids.index(THINK_END) + 1]  # after <think>, up to and with </think>
    parser = qwen_format.parser()
    position = 0
    for size in [*chunk_sizes, len(ids)]:
        parser.feed(ids[position : position + size])
        position += size
    assert parser.reasoning_tokens == len(reasoning)
