"""Rendering only the new items (`ChatFormat.render_tail`) gives exactly the prompt of the
full path (render everything twice, splice), token for token, on random agent histories."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gateway.core.conversation import Conversation, Item, Message, Reasoning, Tool, ToolCall, ToolOutput
from gateway.core.sampling import GenerationDefaults, SamplingOptions
from gateway.formats.base import ChatFormat, Covered
from gateway.pipeline import session
from gateway.pipeline.request import TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.turn import Turn
from gateway.store.responses import CachedResponse
from gateway.tokenfix.prompt import PromptBuilder
from gateway.tokenfix.state import TokenState
from gateway.upstream.pool import Pool

# The same examples every run (a random draw failed the filter health check once in a while: a family
# whose template re-renders few of the drawn turns leaves many cases to `assume`).
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
TOOL = Tool("get_weather", "Get the weather for a city.",
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
# Plain text, and strings that are markup in one format or the other (they must stay text).
FRAGMENTS = ["a", "Hello", " ", "\n", "é", "{}", "<|im_end|>", "<tool_response>", "</tool_response>", "</think>",
             "<|end|>", "<|start|>", "<|call|>"]
text = st.lists(st.sampled_from(FRAGMENTS), max_size=5).map("".join)


@st.composite
def model_turn(draw, ids) -> list[Item]:
    """What one generation becomes: reasoning, text (final or commentary) and tool calls."""
    items: list[Item] = []
    if draw(st.booleans()):
        items.append(Reasoning(text=draw(text)))
    if draw(st.booleans()):
        items.append(Message(role="assistant", text=draw(text), channel=draw(st.sampled_from([None, "commentary"]))))
    for _ in range(draw(st.integers(0, 2))):
        items.append(ToolCall(call_id=f"call_{next(ids)}", name="get_weather", arguments=f'{{"city": "{draw(text)}"}}'))
    return items or [Message(role="assistant", text="")]


@st.composite
def answers(draw, turn: list[Item]) -> list[Item]:
    """The turn's tool outputs, or a user or developer message; now and then the client
    appends assistant items of its own (which take the full render)."""
    calls = [item for item in turn if isinstance(item, ToolCall)]
    choices = [st.just([Message(role="user", text=draw(text))]),
               st.just([Message(role="developer", text=draw(text))])]
    if calls:
        outputs = [ToolOutput(call_id=c.call_id, output=draw(text), name=c.name) for c in calls]
        choices += [st.just(outputs)] * 3
    new = list(draw(st.one_of(choices)))
    if draw(st.integers(0, 5)) == 0:
        new.append(draw(st.sampled_from([Message(role="assistant", text="Sure."), Reasoning(text="Hm.")])))
    return new


@st.composite
def continuations(draw):
    """(conversation before the model's turn, the model's turn, the new items, cut by the length limit)."""
    ids = itertools.count()
    items: list[Item] = [Message(role="user", text=draw(text))]
    for _ in range(draw(st.integers(0, 3))):
        turn = draw(model_turn(ids))
        items += [*turn, *draw(answers(turn))]
    turn = draw(model_turn(ids))
    context = Conversation(items=items, instructions=draw(st.one_of(st.none(), text.filter(bool))),
                           tools=draw(st.sampled_from([[], [TOOL]])))
    return context, turn, draw(answers(turn)), draw(st.booleans())


def runtime(chat_format: ChatFormat) -> Runtime:
    return Runtime(model_name="m", format=chat_format, defaults=GenerationDefaults(), pool=Pool([]))


def drifted(state: TokenState, chat_format: ChatFormat, step: int) -> TokenState:
    """The model's tokens differ from the template's re-render of them (merges, formatting)."""
    tokens = state.tokens
    for i in range(state.prompt_len, len(tokens), step):
        if tokens[i] not in chat_format.turn_terminators:
            tokens[i] = 9707  # "Hello" in both vocabularies: an id no render here would put there
    return state


async def both_ways(chat_format: ChatFormat, case) -> tuple[Conversation, TokenState, list[int], list[int]]:
    before, turn, new, cut = case
    state = TokenState.of_template_turn(chat_format, before, turn, cut=cut)
    assume(state is not None)  # a prompt ending in an assistant message the template re-renders
    state = drifted(state, chat_format, 3)
    conversation = dataclasses.replace(before, items=[*before.items, *turn, *new])
    incremental = await turn_for(chat_format, conversation, state)
    full = PromptBuilder(chat_format, conversation, state)
    reference = list(full.full())  # render everything twice, splice
    assert incremental.record.spliced == full.spliced
    return conversation, state, list(incremental.record.prompt_ids), reference


async def turn_for(chat_format: ChatFormat, conversation: Conversation, state: TokenState) -> Turn:
    """The turn the pipeline makes for a request continuing `state`, its prompt rendered."""
    # The state comes as a previous response's: client ids would be checked against the history,
    # and these are drifted on purpose.
    previous = CachedResponse("resp_prev", conversation, state)
    turn = await session.prepare(runtime(chat_format), TurnRequest(conversation, SamplingOptions(),
                                                                    previous=previous))
    await turn.render()
    return turn


@SETTINGS
@given(case=continuations())
async def test_qwen3_incremental_prompt_equals_full_render_and_splice(qwen_format, case):
    conversation, state, ids, reference = await both_ways(qwen_format, case)
    assert ids == reference
    covered = state.continued_by(conversation, qwen_format.turn_terminators)
    new = conversation.items[covered.items:]
    if all(isinstance(i, ToolOutput) or isinstance(i, Message) and i.role == "developer" for i in new) and (
            conversation.instructions or covered.turn_start > 0):
        assert qwen_format.render_tail(conversation, covered) is not None  # the fast path was taken


@SETTINGS
@given(case=continuations())
async def test_harmony_incremental_prompt_equals_full_render_and_splice(harmony_format, case):
    conversation, state, ids, reference = await both_ways(harmony_format, case)
    assert ids == reference
    covered = state.continued_by(conversation, harmony_format.turn_terminators)
    if not any(isinstance(i, Message) and i.role == "assistant" and i.channel is None
               for i in conversation.items[covered.items:]):
        assert harmony_format.render_tail(conversation, covered) is not None


def agent_case(chat_format: ChatFormat) -> tuple[Conversation, TokenState, Covered]:
    before = Conversation(items=[Message(role="user", text="What is the weather in Paris?")],
                          instructions="Be brief.", tools=[TOOL])
    call = ToolCall(call_id="call_1", name="get_weather", arguments='{"city": "Paris"}')
    state = TokenState.of_template_turn(chat_format, before, [Reasoning(text="Look it up."), call])
    conversation = dataclasses.replace(before, items=[*before.items, Reasoning(text="Look it up."), call,
                                                      ToolOutput(call_id="call_1", output="18C", name="get_weather")])
    return conversation, state, state.continued_by(conversation, chat_format.turn_terminators)


def test_qwen3_renders_tool_outputs_alone_but_not_new_user_queries(qwen_format):
    """Qwen3's template strips earlier turns' reasoning once a new user query arrives, so
    only tool outputs and system messages may be rendered in a window."""
    conversation, _, covered = agent_case(qwen_format)
    tail = qwen_format.render_tail(conversation, covered)
    assert tail is not None
    assert qwen_format.decode(tail.ids) == ("<|im_end|>\n<|im_start|>user\n<tool_response>\n18C\n</tool_response>"
                                            "<|im_end|>\n<|im_start|>assistant\n")
    asked = dataclasses.replace(conversation, items=[*conversation.items[:-1], Message(role="user", text="And Rome?")])
    assert qwen_format.render_tail(asked, covered) is None


def test_harmony_tail_is_the_new_messages(harmony_format):
    conversation, state, covered = agent_case(harmony_format)
    tail = harmony_format.render_tail(conversation, covered)
    assert harmony_format.decode(tail.ids) == ("<|call|><|start|>functions.get_weather to=assistant<|channel|>commentary"
                                        "<|message|>18C<|end|><|start|>assistant")
    assert tail.turns == state.model_turns  # system, developer, user, analysis, call


async def test_the_spliced_prompt_keeps_the_model_tokens(qwen_format):
    conversation, state, _ = agent_case(qwen_format)
    state = drifted(state, qwen_format, 2)
    record = (await turn_for(qwen_format, conversation, state)).record
    assert record.spliced and not record.non_monotonic
    assert list(record.prompt_ids[:len(state.tokens)]) == list(state.tokens)
    assert record.prompt_token_ids == list(record.prompt_ids)


def test_a_template_that_is_not_local_is_not_windowed(qwen_tokenizer_dir: Path):
    """A template numbering tool results across the whole conversation fails the probes."""
    from transformers import AutoTokenizer

    from gateway.formats.hf.format import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    tokenizer = AutoTokenizer.from_pretrained(qwen_tokenizer_dir)
    tokenizer.chat_template = (
        "{%- set ns = namespace(n=0) %}{%- for m in messages %}"
        "{%- if m.role == 'tool' %}{%- set ns.n = ns.n + 1 %}"
        "{{- '<|im_start|>tool ' ~ ns.n ~ '\\n' + m.content + '<|im_end|>\\n' }}"
        "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' }}{%- endif %}"
        "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
    chat_format = HFChatFormat(tokenizer, locality=failing_kinds)
    conversation, _, covered = agent_case(chat_format)
    assert "tool" not in chat_format.incremental_kinds
    assert chat_format.render_tail(conversation, covered) is None


items = st.lists(st.one_of(
    st.builds(Message, role=st.sampled_from(["user", "assistant", "developer"]), text=text,
              channel=st.sampled_from([None, "commentary"])),
    st.builds(Reasoning, text=text),
    st.builds(ToolCall, call_id=text, name=text, arguments=text),
    st.builds(ToolOutput, call_id=text, output=text, name=st.one_of(st.none(), text)),
), max_size=4)


@given(items, items)
def test_history_digest_tells_histories_apart(first, second):
    from gateway.tokenfix.state import history_digest

    assert (history_digest(first) == history_digest(second)) == (first == second)
