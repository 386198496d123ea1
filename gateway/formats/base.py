"""The contract between the turn pipeline and a model format (harmony, HF chat template).

A format renders a `Conversation` to prompt token ids and parses the model's output
token ids back into items, incrementally, as they stream. It never does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from gateway.core.conversation import Conversation, Item, Message, Reasoning, Tool, ToolCall
from gateway.core.image import Image
from gateway.core.sampling import OutputConstraint

__all__ = ["ChatFormat", "Covered", "ItemDelta", "ItemDone", "ItemKind", "ItemStarted", "LocalityProbe", "ParseEvent",
           "Tail", "output_item", "parse_output"]

ItemKind = Literal["reasoning", "text", "tool_call"]


@dataclass(slots=True)
class ItemStarted:
    """A new output item begins. `name` is the tool name for tool calls."""

    index: int
    kind: ItemKind
    name: str | None = None
    channel: str | None = None  # harmony channel of a text item ("final" | "commentary")
    call_id: str | None = None  # a tool call's id: the model's own where its format writes one (Kimi), else the turn pipeline's


@dataclass(slots=True)
class ItemDelta:
    """More text for item `index` (for tool calls: more of the JSON arguments). `span`: the
    output positions of the tokens that made it, set by the turn pipeline when logprobs were
    asked for (not by parsers)."""

    index: int
    text: str
    span: tuple[int, int] | None = None


@dataclass(slots=True)
class ItemDone:
    """Item `index` is complete; `text` is its whole content (tool calls: the arguments)."""

    index: int
    text: str


ParseEvent = ItemStarted | ItemDelta | ItemDone


def output_item(start: ItemStarted, text: str) -> Item:
    """A parsed output item (its `ItemStarted` and its `ItemDone` text) as the history holds it."""
    if start.kind == "tool_call":
        return ToolCall(call_id=start.call_id or "", name=start.name or "", arguments=text)
    if start.kind == "reasoning":
        return Reasoning(text=text)
    return Message(role="assistant", text=text, channel="commentary" if start.channel == "commentary" else None)


def parse_output(chat_format: ChatFormat, ids: Sequence[int], tools: Sequence[Tool], thinking: bool) -> list[Item]:
    """A whole generation's ids as the items the format's parser reads in them."""
    parser = chat_format.parser(tools, thinking=thinking)
    started: dict[int, ItemStarted] = {}
    items: list[Item] = []
    for event in [*parser.feed(ids), *parser.finish()]:
        if isinstance(event, ItemStarted):
            started[event.index] = event
        elif isinstance(event, ItemDone):
            items.append(output_item(started.pop(event.index), event.text))
    return items


@dataclass(slots=True)
class Covered:
    """The part of a conversation's history that an earlier turn's exact tokens cover."""

    items: int  # items[:items] are covered…
    turn_start: int  # …and items[turn_start:items] were the model's own turn
    prompt_turns: int  # turn terminators in that turn's prompt (the render of items[:turn_start])
    context: bytes  # digest of what else shaped that render (instructions, tools), for caches


@dataclass(slots=True)
class Tail:
    """What splicing needs from a render, computed without rendering the covered history.

    `turns`: turn terminators in the render of the covered history (`items[:covered]`).
    `ids`: the render of the whole conversation from its `turns`-th terminator on: the new
    items and the generation prompt. Both renders must agree on the history before the
    model's turn (what `splice` checks).
    """

    turns: int
    ids: list[int]


class OutputParser(Protocol):
    """Per-request streaming parser: output token ids in, item events out.

    Indices start at 0 and increase by one per item; every started item gets exactly
    one `ItemDone`, by `finish()` at the latest. Malformed model output degrades to
    text items; the parser never raises on model output. `reasoning_tokens` counts the
    tokens fed so far that were reasoning (however they were split into `feed` calls).
    """

    reasoning_tokens: int

    def feed(self, token_ids: Sequence[int]) -> list[ParseEvent]: ...

    def finish(self) -> list[ParseEvent]: ...


class ChatFormat(Protocol):
    name: str
    # Token ids that end generation; sent upstream explicitly as stop_token_ids.
    stop_token_ids: list[int]
    # Token ids that close an assistant turn in a rendered history (for splicing).
    turn_terminators: frozenset[int]
    # Those of them that open the next message rather than close the model's (GLM ends its turn
    # on `<|observation|>` or `<|user|>`): where the history opens another, the template's replaces
    # the model's stop token. Empty for formats whose turns close themselves.
    turn_openers: frozenset[int]
    # Bytes of text the longest token stands for (gateway/formats/length.py bounds prompts by it).
    max_token_bytes: int
    # The placeholder a vision model's template writes once per image (vLLM expands it); None: text only.
    image_token_id: int | None

    def render(self, conversation: Conversation) -> list[int]:
        """Prompt token ids for the whole conversation, ending with the generation prompt.

        User, developer, tool and assistant text must never produce special tokens:
        a tool output containing `<|im_end|>` is tokenized as plain text.
        """
        ...

    def render_tail(self, conversation: Conversation, covered: Covered) -> Tail | None:
        """`render`'s end past the covered history, in time that grows with the new items only.

        Exactly what the full renders would give (tests compare); None when this format cannot
        tell for these items without rendering everything (the caller then does).
        """
        ...

    def parser(self, tools: Sequence[Tool] = (), *, thinking: bool = True) -> OutputParser:
        """A fresh streaming parser for one generation; `tools` are the request's (formats whose
        calls carry untyped text, like Qwen's XML, type the arguments by their schemas); `thinking`
        is the request's `Conversation.thinking` (where the switch decides how output starts)."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str:
        """Plain text of token ids (special tokens included), for logs and debugging."""
        ...

    def token_bytes(self, token_id: int) -> bytes:
        """What one id stands for, as bytes (a special token: its markup), for logprobs."""
        ...

    def image_tokens(self, image: Image) -> int:
        """The prompt tokens `image` becomes once vLLM expands its placeholder (at least 1)."""
        ...

    def structured_outputs(self, constraint: OutputConstraint, tools: Sequence[Tool], *,
                           thinking: bool = True) -> dict[str, Any]:
        """vLLM's `structured_outputs` enforcing `constraint` in this format's own output syntax
        ({}: nothing to enforce); raises APIError (400) for what this format cannot enforce.
        `thinking`: the prompt was rendered with thinking on (`Conversation.thinking`)."""
        ...


# (format, its window's tail) -> the kinds of new items whose windowed continuation differs from the
# full render + splice (gateway/tokenfix/locality.py; gateway/formats/hf/_window.py uses it)
LocalityProbe = Callable[[ChatFormat, Callable[[Conversation, Covered], "Tail | None"]], set[str]]
