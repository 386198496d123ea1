"""vLLM's expansion of a prompt's image placeholders, as a turn keeps it (TurnRecord.expanded): per
image, the ids that took its placeholder's place, only when they account for all of vLLM's prompt."""

from __future__ import annotations

from array import array

from gateway.core.conversation import Conversation
from gateway.tokenfix.record import TurnRecord

PAD, START, END = 9, 7, 8
PROMPT = [1, START, PAD, END, 2, START, PAD, END, 3]  # two images, one placeholder each


def turn(prompt=PROMPT) -> TurnRecord:
    record = TurnRecord("r", "m", Conversation([]), prompt_ids=prompt)
    record.image_spans = [(i, 0) for i, token in enumerate(prompt) if token == PAD]
    return record


def test_each_placeholder_becomes_the_ids_vllm_put_in_its_place():
    record = turn(array("i", PROMPT))  # a spliced prompt is an int32 array
    record.expanded([1, START, PAD, PAD, PAD, END, 2, START, PAD, PAD, END, 3],
                    {"image": [{"offset": 2, "length": 3}, {"offset": 8, "length": 2}]})
    assert record.image_expansions == [[PAD] * 3, [PAD] * 2]


def test_tokens_vllm_inserts_before_an_image_range_belong_to_its_expansion():
    record = turn()
    record.expanded([1, START, 5, PAD, PAD, END, 2, START, PAD, END, 3],
                    {"image": [{"offset": 3, "length": 2}, {"offset": 8, "length": 1}]})
    assert record.image_expansions == [[5, PAD, PAD], [PAD]]


def test_nothing_is_kept_unless_the_rest_of_vllms_prompt_is_this_one():
    for prompt, ranges in [
        ([1, START, PAD, PAD, END, 4, START, PAD, END, 3], [{"offset": 2, "length": 2}, {"offset": 7, "length": 1}]),
        ([1, START, PAD, PAD, END, 2, START, PAD, END, 3, 3], [{"offset": 2, "length": 2}, {"offset": 7, "length": 1}]),
        ([1, START, PAD, PAD, END, 2, START, PAD, END, 3], [{"offset": 2, "length": 2}]),  # one range for two images
        ([1, START, PAD, END, 2, START, PAD, END, 3], [{"offset": 0, "length": 1}, {"offset": 6, "length": 1}]),
    ]:
        record = turn()
        record.expanded(prompt, {"image": ranges})
        assert record.image_expansions is None, (prompt, ranges)
    record = turn()
    record.expanded(PROMPT, None)
    assert record.image_expansions is None
