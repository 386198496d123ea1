"""Splice the model's exact tokens into a re-rendered prompt.

Re-rendering and re-tokenizing earlier model output drifts from what the model saw
(merges like "_Ski"+"nny" → "_Skinny", templates that reformat tool calls). Instead,
the next prompt is: the exact earlier tokens (prompt + generation), then the template's
tokens from the end of that assistant turn on.

Turns are located by counting turn terminators (`<|im_end|>`; harmony `<|end|>`,
`<|return|>`, `<|call|>`). That is sound because formats never let message text
produce special tokens, so every terminator in a render is the template's own.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from gateway.formats.base import Tail
from gateway.tokenfix._terminators import count_terminators, nth_terminator
from gateway.tokenfix.state import TokenState

__all__ = ["splice", "splice_tail"]


def splice(
    model_prefix: Sequence[int],
    prompt_len: int,
    template_prefix: Sequence[int],
    template: Sequence[int],
    terminators: frozenset[int],
    openers: frozenset[int] = frozenset(),
) -> list[int] | array | None:
    """The prompt for the next call, or None when the template is not monotonic.

    - `model_prefix`: what the model saw and produced (earlier prompt + generated ids);
      its first `prompt_len` ids were the prompt.
    - `template_prefix`: the re-render of the same history, up to and including the
      last assistant turn (anything after its terminator is ignored).
    - `template`: the re-render of the whole new history, with the generation prompt.

    The two renders must agree up to where the last generation began: templates may
    render the final assistant turn differently depending on what follows it (Qwen3
    adds an empty think block to the last message only), but a render that changes
    earlier turns (stripped reasoning, a rewritten history) is refused.

    The model's last turn ended with a terminator it emitted (kept as is, even when the
    template writes a different one, e.g. harmony `<|return|>` vs `<|end|>`), or was cut
    by the length limit: then the template's terminator closes it. A terminator that opens the
    next message (`openers`, GLM's) gives way to the template's when that is another. The template may
    render that turn as more messages than the model wrote (a client that shaped the
    assistant message itself, e.g. harmony text + a tool call): the model's tokens
    replace all of them.

    No earlier model tokens (a first turn): the prompt is the template itself.
    """
    if not model_prefix:
        return template if isinstance(template, array) else list(template)
    turns = count_terminators(template_prefix, terminators)
    end = nth_terminator(template, terminators, turns)
    if turns == 0 or end is None:
        return None
    prompt_turns = count_terminators(model_prefix[:prompt_len], terminators)
    start = nth_terminator(template, terminators, prompt_turns)
    if start is None or start >= end or list(template[: start + 1]) != list(template_prefix[: start + 1]):
        return None  # the re-render changed the history before the last generation
    model_turns = count_terminators(model_prefix, terminators)
    return _continue(model_prefix, prompt_len, model_turns, turns, template[end:], terminators, openers)


def splice_tail(state: TokenState, tail: Tail, terminators: frozenset[int],
                openers: frozenset[int] = frozenset()) -> array | None:
    """`splice` when the format rendered only the tail (`ChatFormat.render_tail`), which
    vouches that the history before the last generation re-renders unchanged."""
    if state.prompt_turns >= tail.turns:
        return None  # the re-render has no room for the last generation
    return _continue(state.tokens, state.prompt_len, state.model_turns, tail.turns, tail.ids, terminators, openers)


def _continue(model_prefix: Sequence[int], prompt_len: int, model_turns: int, turns: int, tail: Sequence[int],
              terminators: frozenset[int], openers: frozenset[int]) -> list[int] | array | None:
    """The model's tokens, then the template's from the end of the model's last turn (`tail`
    starts at the template's terminator of that turn, the `turns`-th)."""
    if model_turns > turns:
        return None
    if len(model_prefix) > prompt_len and model_prefix[-1] in terminators:
        if model_prefix[-1] in openers and model_prefix[-1] != tail[0]:
            return _join(model_prefix[:-1], tail)  # it opened another message than the history's next
        return _join(model_prefix, tail[1:])  # the model closed its turn
    if model_turns == turns:
        return None  # tokens after the model's last terminator would be a dangling header
    return _join(model_prefix, tail)  # cut by the length limit: close it the template's way


def _join(model_prefix: Sequence[int], tail: Sequence[int]) -> list[int] | array:
    if isinstance(model_prefix, array):
        joined = array("i", model_prefix)  # a memcpy, not one int object per id
        joined.extend(tail)
        return joined
    return [*model_prefix, *tail]
