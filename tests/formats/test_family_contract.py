"""The contracts every model family's parser and renderer keep (tests/support/family_contract.py),
checked once for each family's declaration; each family's own modules keep only what is their own."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.formats import families
from gateway.formats.base import ItemDelta, ItemDone, ItemStarted
from tests.formats import (
    test_deepseek_parser,
    test_deepseek_render,
    test_glm_parser,
    test_glm_render,
    test_json_calls,
    test_kimi_parser,
    test_kimi_render,
    test_llama4_pythonic,
    test_minimax_parser,
    test_minimax_render,
    test_olmo3_lfm2,
    test_qwen_xml_parser,
    test_qwen_xml_render,
    test_seed_oss,
    test_step3p5,
)
from tests.formats.dsml import test_parser as dsml_tests
from tests.formats.test_qwen_xml_render import conversation as random_conversation
from tests.support import family_cases, family_render
from tests.support.family_contract import (
    Continuation,
    OutputContract,
    RenderContract,
    first_turn,
    injected,
    rendered_as,
    spelled_ids,
)
from tests.support.family_render import reference_ids

DECLARED = {module.CONTRACT.family: module.CONTRACT for module in (
    test_deepseek_parser, dsml_tests, test_glm_parser, test_kimi_parser, test_minimax_parser, test_qwen_xml_parser,
    test_seed_oss, test_step3p5, test_llama4_pythonic)}
DECLARED |= {"olmo3": test_olmo3_lfm2.OLMO3_CONTRACT, "dsml_v41": dsml_tests.V41_CONTRACT, "lfm2": test_olmo3_lfm2.LFM2_CONTRACT,
             **{contract.family: contract for contract in test_json_calls.CONTRACTS},
             "pythonic": test_llama4_pythonic.LLAMA32_CONTRACT}
DECLARED |= {name: cases.contract for name, cases in family_cases.FAMILIES.items()}
# Registered families whose parser this suite does not take (yet), and the module that checks it.
CHECKED_ELSEWHERE = {"dsml_v32": "dsml/test_parser.py", "gemma4": "test_gemma4.py", "llama3_json": "test_llama3_json.py",
                     "hermes": "hf/test_parser.py", "none": "each family's selection test"}
CONTRACTS = [DECLARED[family.name] for family in families.FAMILIES if family.name in DECLARED]  # the registry's order
RENDERS = [module.RENDER for module in (test_deepseek_render, test_glm_render, test_kimi_render,
                                        test_minimax_render, test_qwen_xml_render, test_seed_oss,
                                        test_step3p5, test_llama4_pythonic)] + [
    test_olmo3_lfm2.OLMO3_RENDER, test_olmo3_lfm2.LFM2_RENDER, *test_json_calls.RENDERS,
    test_llama4_pythonic.LLAMA32_RENDER, *(cases.render for cases in family_cases.FAMILIES.values())]
HISTORIES = [pytest.param(contract, conversation, expected, id=f"{contract}-{n}")
             for contract in RENDERS for n, (conversation, expected) in enumerate(contract.histories)]
CONTINUATIONS = [pytest.param(contract, case, id=f"{contract}-{case.about}")
                 for contract in RENDERS for case in contract.continuations]
MALFORMED = [(contract, output, expected) for contract in CONTRACTS for output, expected in contract.malformed]
CASES = [pytest.param(contract, case, id=f"{contract}-{case.about or n}")
         for contract in CONTRACTS for n, case in enumerate(contract.cases)]


def test_every_registered_family_keeps_the_contract():
    """A family added to the registry (gateway/formats/families.py) declares its CONTRACT here too."""
    assert {family.name for family in families.FAMILIES} == DECLARED.keys() | CHECKED_ELSEWHERE.keys()


@pytest.fixture
def family(request: pytest.FixtureRequest):
    """(contract, its format, its tokenizer) for the parametrised contract."""
    contract: OutputContract = request.param
    return contract, request.getfixturevalue(contract.format), request.getfixturevalue(contract.tokenizer)


@pytest.mark.parametrize("family", [c for c in CONTRACTS if c.stops], ids=str, indirect=True)
def test_the_format_reads_the_family_off_its_template(family):
    """Its calls, its stop ids (eos first), and the turns a render counts."""
    contract, chat_format, _ = family
    assert chat_format.tool_calls == contract.family
    assert chat_format.stop_token_ids == list(contract.stops)
    assert chat_format.turn_terminators == frozenset(contract.stops if contract.terminators is None
                                                     else contract.terminators)
    if contract.openers is not None:
        assert chat_format.turn_openers == frozenset(contract.openers)


@pytest.mark.parametrize(("family", "case"), CASES, indirect=["family"])
def test_each_output_of_the_family_parses_as_declared(family, case):
    contract, chat_format, tokenizer = family
    ids = contract.ids(tokenizer, case.output)
    assert contract.parse(chat_format, ids, tools=case.tools) == case.items
    assert contract.parse(chat_format, ids, [1] * len(ids), tools=case.tools) == case.items
    if case.events is not None:
        assert contract.events(chat_format, ids, [1] * len(ids), tools=case.tools) == list(case.events)


@pytest.mark.parametrize("family", [c for c in CONTRACTS if c.streamed], ids=str, indirect=True)
def test_a_string_value_streams_as_it_is_written(family):
    contract, chat_format, tokenizer = family
    output, value = contract.streamed
    ids = contract.ids(tokenizer, output)
    deltas = [e.text for e in contract.events(chat_format, ids, [1] * len(ids)) if isinstance(e, ItemDelta)]
    assert deltas[:2] == ["{", '"path": "'] and deltas[-2:] == ['"', "}"]
    assert len(deltas) > 10  # the value came in pieces, as the tokens did
    assert json.loads("".join(deltas)) == {"path": value}


@pytest.mark.parametrize("split", ["canonical", "bytes"])
@pytest.mark.parametrize("family", CONTRACTS, ids=str, indirect=True)
def test_any_split_gives_the_same_items(family, split):
    contract, chat_format, tokenizer = family
    ids = contract.ids(tokenizer, contract.agent_turn, split=split)
    assert contract.parse(chat_format, ids) == contract.agent_items
    assert contract.parse(chat_format, ids, [1] * len(ids)) == contract.agent_items
    rng = random.Random(contract.seed)
    for _ in range(30):
        assert contract.parse(chat_format, ids, [rng.randint(0, 7) for _ in ids]) == contract.agent_items


@pytest.mark.parametrize("family", CONTRACTS, ids=str, indirect=True)
def test_every_split_point_of_a_call(family):
    """The whole turn in two feeds, cut at every token boundary (tags and multi-byte characters split)."""
    contract, chat_format, tokenizer = family
    ids = contract.ids(tokenizer, contract.split_turn, split="bytes")
    for cut in range(len(ids) + 1):
        assert contract.parse(chat_format, ids, [cut]) == contract.split_items


@pytest.mark.parametrize("family", [c for c in CONTRACTS if c.cut_call], ids=str, indirect=True)
def test_a_call_cut_off_keeps_what_was_streamed(family):
    """The generation stopped inside a call's arguments: the call as far as written, completed by the
    parser's finish where its format streams one JSON object."""
    contract, chat_format, tokenizer = family
    output, name, streamed, arguments = contract.cut_call
    parser = chat_format.parser(contract.tools)
    events = parser.feed(contract.ids(tokenizer, output))
    assert events[0] == ItemStarted(0, "tool_call", name=name)
    assert "".join(e.text for e in events if isinstance(e, ItemDelta)) == streamed
    *closing, done = parser.finish()
    assert done == ItemDone(0, arguments)
    assert streamed + "".join(e.text for e in closing if isinstance(e, ItemDelta)) == arguments


@pytest.mark.parametrize(("family", "output", "expected"), [pytest.param(*case, id=f"{case[0]}-{n}")
                                                            for n, case in enumerate(MALFORMED)],
                         indirect=["family"])
def test_malformed_markup_degrades(family, output, expected):
    contract, chat_format, tokenizer = family
    ids = contract.ids(tokenizer, contract.prefix + output)
    assert contract.parse(chat_format, ids) == expected
    assert contract.parse(chat_format, ids, [1] * len(ids)) == expected


@pytest.mark.parametrize("contract", CONTRACTS, ids=str)
def test_any_output_parses_without_error_and_keeps_the_contract(contract, request):
    chat_format = request.getfixturevalue(contract.fuzz_format or contract.format)
    tokenizer = request.getfixturevalue(contract.tokenizer)

    @settings(max_examples=contract.examples, derandomize=True, deadline=None)
    @given(pieces=st.lists(st.sampled_from(contract.fragments), max_size=40),
           split=st.sampled_from(["canonical", "bytes"]), seed=st.integers(0, 2**16))
    def check(pieces, split, seed):
        ids = contract.ids(tokenizer, "".join(pieces), split=split)
        whole = contract.parse(chat_format, ids)
        rng = random.Random(seed)
        assert contract.parse(chat_format, ids, [rng.randint(0, 4) for _ in ids]) == whole
        if contract.json_arguments:
            for kind, _, text in whole:
                if kind == "tool_call":
                    json.loads(text)  # the streamed arguments are one JSON object

    check()


@pytest.mark.parametrize("contract", RENDERS, ids=str)
def test_render_equals_apply_chat_template_on_random_conversations(contract: RenderContract, request):
    """Tools, reasoning, parallel calls, tool outputs, instructions and developer messages anywhere."""
    chat_format = request.getfixturevalue(contract.format)
    tokenizer = request.getfixturevalue(contract.tokenizer)
    rng = random.Random(contract.seed)
    for n in range(2000):
        case = random_conversation(rng)
        assert chat_format.render(case) == reference_ids(tokenizer, case, contract.prepare), (n, case)


@pytest.mark.parametrize(("contract", "conversation", "expected"), HISTORIES)
def test_render_of_an_agent_history(contract: RenderContract, conversation, expected, request):
    chat_format = request.getfixturevalue(contract.format)
    text = chat_format.decode(chat_format.render(conversation))
    assert rendered_as(text, expected), text


def _holds(ids: list[int], run: list[int]) -> bool:
    return any(ids[i:i + len(run)] == run for i in range(len(ids) - len(run) + 1))


@pytest.mark.parametrize("contract", [c for c in RENDERS if c.injection], ids=str)
def test_markup_in_user_tool_and_argument_text_is_plain_text(contract: RenderContract, request):
    chat_format = request.getfixturevalue(contract.format)
    tokenizer = request.getfixturevalue(contract.tokenizer)
    injection = contract.injection
    ids = chat_format.render(injected(injection.text, injection))
    assert not any(injection.is_markup(t) for t in tokenizer._encode_without_added_tokens(injection.text))
    for pieces in injection.spelled:
        assert _holds(ids, spelled_ids(tokenizer, pieces, injection.text)), pieces
    ends = spelled_ids(tokenizer, injection.ends, injection.text)
    assert ids[len(ids) - len(ends):] == ends
    # The only markup ids are the template's own: those of the same conversation without the injections.
    clean = chat_format.render(injected("x", injection))
    assert [t for t in ids if injection.is_markup(t)] == [t for t in clean if injection.is_markup(t)]
    assert chat_format.decode(ids).count(injection.text) == injection.count


@pytest.mark.parametrize(("contract", "case"), CONTINUATIONS)
async def test_the_next_prompt_continues_the_model_s_own_ids(contract: RenderContract, case: Continuation, request):
    chat_format = request.getfixturevalue(contract.format)
    generated = case.generated(request.getfixturevalue(contract.tokenizer))
    before = first_turn(contract.tools)
    if case.kinds is not None:
        turn = family_render.turn_items(chat_format, generated, contract.tools,
                                        reported_call_ids=contract.reported_call_ids)
        assert [type(item) for item in turn] == list(case.kinds)
    prompt, ids = await family_render.continue_after(chat_format, before, generated, case.then,
                                                     reported_call_ids=contract.reported_call_ids,
                                                     expect_tail=case.expect_tail)
    assert prompt[len(prompt) - len(case.prompt_ends):] == list(case.prompt_ends)
    kept = generated[:-1] if case.replaced_stop else generated
    assert ids[:len(prompt) + len(kept)] == prompt + kept
    assert chat_format.decode(ids[len(prompt) + len(kept):]) == case.rest
