"""What the model families' render tests share: the reference render (transformers'
`apply_chat_template`, as vLLM renders), a model turn as a history holds it, what the template
writes back for that turn, and the next turn prepared by the session pipeline on the ids the
model generated. Each family's module keeps what is its own: its markup and expected texts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from gateway.core.conversation import Conversation, Item, Message, Reasoning, Tool, ToolCall
from gateway.core.sampling import GenerationDefaults, SamplingOptions
from gateway.formats.base import ItemStarted
from gateway.formats.hf.render import hf_messages
from gateway.pipeline import session
from gateway.pipeline.request import TurnRequest
from gateway.pipeline.runtime import Runtime
from gateway.tokenfix.state import TokenState
from gateway.upstream.pool import Pool
from tests.support.parse_events import items

Messages = list[dict[str, Any]]


def reference_ids(tokenizer: Any, conversation: Conversation, prepare: Callable[[Messages], Messages] | None = None,
                  **template_kwargs: Any) -> list[int]:
    """The template's own render of `conversation` (messages reshaped by `prepare`, as the family's
    format reshapes them), with the generation prompt."""
    messages, tools = hf_messages(conversation)
    return tokenizer.apply_chat_template(prepare(messages) if prepare else messages, tools=tools or None,
                                         tokenize=True, add_generation_prompt=True, return_dict=False,
                                         **template_kwargs)


def turn_items(chat_format: Any, ids: Sequence[int], tools: Sequence[Tool], *,
               reported_call_ids: bool = False) -> list[Item]:
    """The model's turn parsed into the items a history holds; a call's id is `call_{n}` (n its
    item's index) or, with `reported_call_ids`, the one its parser reports (the model wrote it)."""
    parser = chat_format.parser(tools)
    events = [*parser.feed(ids), *parser.finish()]
    reported = [e.call_id for e in events if isinstance(e, ItemStarted) and e.kind == "tool_call"]
    found: list[Item] = []
    for n, (kind, name, text) in enumerate(items(events)):
        if kind == "reasoning":
            found.append(Reasoning(text))
        elif kind == "text":
            found.append(Message("assistant", text))
        else:
            found.append(ToolCall((reported.pop(0) or "") if reported_call_ids else f"call_{n}", name or "", text))
    return found


def model_turn_ids(chat_format: Any, before: Conversation, turn: list[Item], after: Item) -> list[int]:
    """What the template renders for the model's `turn` when `after` follows it: the ids after the
    prompt up to the first turn terminator."""
    prompt = chat_format.render(before)
    full = chat_format.render(dataclasses.replace(before, items=[*before.items, *turn, after]))
    assert full[:len(prompt)] == prompt
    end = next(i for i in range(len(prompt), len(full)) if full[i] in chat_format.turn_terminators)
    return full[len(prompt):end]


def runtime(chat_format: Any) -> Runtime:
    """A runtime with `chat_format` and no replicas: enough to prepare a turn."""
    return Runtime(model_name="m", format=chat_format, defaults=GenerationDefaults(), pool=Pool([]))


async def continue_after(chat_format: Any, before: Conversation, generated: list[int],
                         new_items: Callable[[list[Item]], list[Item]], *, tools: Sequence[Tool] | None = None,
                         reported_call_ids: bool = False, expect_tail: bool | None = None
                         ) -> tuple[list[int], list[int]]:
    """(the first turn's prompt, the next turn's prompt) when the model generated `generated` after
    `before` and the client sends its turn back followed by `new_items(turn)`. The next prompt is
    prepared by the session pipeline on the model's exact ids, and must splice; with `expect_tail`,
    whether the format renders the new items alone (a window) or needs the full render. The turn is
    parsed with `tools` (default: the conversation's)."""
    prompt = chat_format.render(before)
    turn = turn_items(chat_format, generated, before.tools if tools is None else tools,
                      reported_call_ids=reported_call_ids)
    state = TokenState.build(before, [*before.items, *turn], prompt, generated, chat_format.turn_terminators)
    conversation = dataclasses.replace(before, items=[*before.items, *turn, *new_items(turn)])
    rendered = await session.prepare(runtime(chat_format),
                                     TurnRequest(conversation, SamplingOptions(), client_prefix=state))
    ids = list(await rendered.render())
    assert rendered.record.spliced and not rendered.record.non_monotonic
    if expect_tail is not None:
        covered = state.continued_by(conversation, chat_format.turn_terminators)
        assert (chat_format.render_tail(conversation, covered) is not None) is expect_tail
    return prompt, ids
