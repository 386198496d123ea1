from hypothesis import given
from hypothesis import strategies as st

from gateway.tokenfix._splice import splice
from tests.support.qwen3_tokens import IM_END

HARMONY = frozenset({200007, 200002, 200012})  # <|end|>, <|return|>, <|call|>
QWEN = frozenset({IM_END})

content = st.lists(st.integers(min_value=0, max_value=150_000), max_size=12)


def render(turns, terms):
    return [t for body, term in zip(turns, terms) for t in (*body, term)]


@st.composite
def rollouts(draw, terminators):
    """A history of closed turns whose last one the model generated, then new turns."""
    terms = sorted(terminators)
    history = draw(st.lists(content, min_size=1, max_size=5))
    history_terms = [draw(st.sampled_from(terms)) for _ in history]
    template_last = draw(content)  # how the template re-writes the model's last turn
    # …which may differ when it is the very last message (Qwen3's empty think block)
    template_last_alone = draw(st.one_of(st.just(template_last), content))
    model_last = draw(content)  # what the model really produced (often different tokens)
    model_term = draw(st.sampled_from(terms))  # what the model ended it with
    template_term = draw(st.sampled_from(terms))
    cut = draw(st.booleans())  # generation hit the length limit: no terminator
    new_turns = draw(st.lists(content, min_size=1, max_size=3))
    new_terms = [draw(st.sampled_from(terms)) for _ in new_turns]
    generation_prompt = draw(content)
    closed = render(history, history_terms)
    model_prefix = closed + model_last + ([] if cut else [model_term])
    template_prefix = closed + template_last_alone + [template_term]
    template = closed + template_last + [template_term] + render(new_turns, new_terms) + generation_prompt
    tail = render(new_turns, new_terms) + generation_prompt
    expected = model_prefix + ([template_term] if cut else []) + tail
    return model_prefix, len(closed), template_prefix, template, expected


@given(rollouts(QWEN))
def test_qwen_splice_keeps_model_tokens_and_appends_new_turns(case):
    model_prefix, prompt_len, template_prefix, template, expected = case
    assert splice(model_prefix, prompt_len, template_prefix, template, QWEN) == expected


@given(rollouts(HARMONY))
def test_harmony_splice_keeps_the_terminator_the_model_emitted(case):
    model_prefix, prompt_len, template_prefix, template, expected = case
    result = splice(model_prefix, prompt_len, template_prefix, template, HARMONY)
    assert result == expected
    assert result[: len(model_prefix)] == model_prefix


@given(rollouts(QWEN))
def test_without_drift_the_splice_is_the_template(case):
    _, prompt_len, _, template, _ = case
    end = template.index(IM_END, prompt_len)
    model_prefix = template[: end + 1]
    assert splice(model_prefix, prompt_len, model_prefix, template, QWEN) == template


@given(rollouts(QWEN), st.integers(min_value=0, max_value=20))
def test_rewritten_history_is_refused(case, position):
    model_prefix, prompt_len, template_prefix, template, _ = case
    if prompt_len == 0:
        return
    index = position % prompt_len
    if template[index] in QWEN:
        return
    changed = list(template)
    changed[index] = -1  # the client summarized / truncated / the template stripped something
    assert splice(model_prefix, prompt_len, template_prefix, changed, QWEN) is None


@given(st.lists(content, min_size=1, max_size=4), content, st.booleans(),
       st.lists(st.tuples(content, st.sampled_from(sorted(HARMONY))), min_size=1, max_size=3), content)
def test_a_model_turn_the_template_renders_as_more_messages_is_replaced_whole(history, generated, cut, shaped,
                                                                              tail):
    """The client shaped the assistant message itself (harmony text + a tool call: two
    messages) while the model wrote one: its tokens stand for all of them."""
    closed = render(history, [200007] * len(history))
    model_prefix = closed + generated + ([] if cut else [200002])
    turn = render([body for body, _ in shaped], [term for _, term in shaped])
    template_prefix = closed + turn
    template = template_prefix + tail
    expected = model_prefix + ([turn[-1]] if cut else []) + tail
    assert splice(model_prefix, len(closed), template_prefix, template, HARMONY) == expected


def test_fewer_turns_in_the_new_render_is_refused():
    prefix = [1, IM_END, 2, IM_END]
    assert splice(prefix, 2, prefix, [1, IM_END, 9], QWEN) is None


def test_model_prefix_with_a_different_turn_count_is_refused():
    template_prefix = [1, IM_END, 2, IM_END]
    template = template_prefix + [3, IM_END, 4]
    assert splice([1, IM_END, 5, IM_END, 6, IM_END], 2, template_prefix, template, QWEN) is None


def test_concrete_qwen_example():
    # <|im_start|>user…<|im_end|> <|im_start|>assistant + the model's own tokens for "Skinny"
    model_prefix = [151644, 872, 198, 13, IM_END, 198, 151644, 77091, 198, 50, 7891, 3834, IM_END]
    template_prefix = [151644, 872, 198, 13, IM_END, 198, 151644, 77091, 198, 50, 64012, IM_END]
    template = template_prefix + [198, 151644, 872, 198, 99, IM_END, 198, 151644, 77091, 198]
    assert splice(model_prefix, 9, template_prefix, template, QWEN) == (
        model_prefix + [198, 151644, 872, 198, 99, IM_END, 198, 151644, 77091, 198])


GLM = frozenset({151335, 151336, 151337, 151338})  # <|system|> <|user|> <|assistant|> <|observation|>: openers


def test_a_stop_token_that_opens_a_message_gives_way_to_the_templates():
    """GLM's turn ends on the next message's opener: kept when the history opens that message,
    replaced by the template's when it opens another."""
    prompt = [7, 151336, 8, 151337]  # … <|user|> q <|assistant|>
    model_prefix = [*prompt, 5, 6, 151336]  # the model answered and handed over to the user
    template_prefix = [*prompt, 5, 9, 151337]
    to_user = [*prompt, 5, 9, 151336, 3, 151337]
    to_system = [*prompt, 5, 9, 151335, 4, 151337]
    assert splice(model_prefix, len(prompt), template_prefix, to_user, GLM, GLM) == [*model_prefix, 3, 151337]
    assert splice(model_prefix, len(prompt), template_prefix, to_system, GLM, GLM) == [
        *model_prefix[:-1], 151335, 4, 151337]
    # Without openers a terminator the model wrote is kept, whatever the template writes there.
    assert splice(model_prefix, len(prompt), template_prefix, to_system, GLM) == [*model_prefix, 4, 151337]


def test_an_empty_model_prefix_is_the_template():
    """No earlier model output (a first turn): the prompt is the template as rendered, not the
    template less its first turn. NeMo-RL's own case for its splice
    (tests/unit/models/generation/test_openai_server_utils.py,
    test_replace_prefix_tokens_empty_model_prefix_returns_template), with Qwen3's terminator."""
    assert splice([], 0, [9, IM_END], [9, IM_END, 33, 44], QWEN) == [9, IM_END, 33, 44]
    assert splice([], 0, [], [9, IM_END, 33, 44], QWEN) == [9, IM_END, 33, 44]
