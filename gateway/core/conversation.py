"""The canonical conversation: what every API adapter produces and every model format renders.

Adapters (Responses, Chat Completions, Codex rewriting) translate their wire shapes into
these plain records; formats (harmony, HF chat templates) turn them into prompt token ids.
Neither side knows about the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.core.image import Image

__all__ = ["Conversation", "Item", "Message", "Reasoning", "Tool", "ToolCall", "ToolGrammar", "ToolOutput", "images_of", "with_parts"]

Role = Literal["system", "developer", "user", "assistant"]
NO_THINKING = ("none", "minimal")  # reasoning efforts that turn a template's thinking off


@dataclass(slots=True)
class Message:
    """A message. Assistant messages may carry a harmony channel ("final"/"commentary"). A message
    with images keeps its content in order in `parts` (text and images); `text` is its text."""

    role: Role
    text: str
    channel: str | None = None
    parts: tuple[str | Image, ...] = ()


@dataclass(slots=True)
class Reasoning:
    """Model reasoning (Qwen `<think>`, harmony `analysis` channel)."""

    text: str


@dataclass(slots=True)
class ToolCall:
    """A call the model made. `arguments` is the raw JSON text exactly as the model wrote it."""

    call_id: str
    name: str
    arguments: str


@dataclass(slots=True)
class ToolOutput:
    """The result of a tool call, as text (and images in order in `parts`, when it has any: Codex's
    `view_image`, Claude Code's Read of a PNG). `name` is filled in from the matching call."""

    call_id: str
    output: str
    name: str | None = None
    parts: tuple[str | Image, ...] = ()


Item = Message | Reasoning | ToolCall | ToolOutput


def with_parts(parts: list[str | Image]) -> tuple[str, tuple[str | Image, ...]]:
    """An item's text and its `parts`: none unless it holds an image."""
    text = "".join(p for p in parts if isinstance(p, str))
    return text, tuple(parts) if any(isinstance(p, Image) for p in parts) else ()


def images_of(items: list[Item]) -> list[Image]:
    """The conversation's images in the order a template writes them."""
    return [p for item in items if isinstance(item, (Message, ToolOutput)) for p in item.parts
            if isinstance(p, Image)]


@dataclass(frozen=True, slots=True)
class ToolGrammar:
    """What a custom tool's input must match: OpenAI's `format: {"type": "grammar", "syntax":
    "lark" | "regex", "definition"}`."""

    syntax: str
    definition: str


@dataclass(slots=True)
class Tool:
    """A callable tool offered to the model. `parameters` is a JSON schema object; a custom
    tool's `grammar` constrains the one string it takes (gateway/formats/_tool_grammar.py)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None
    grammar: ToolGrammar | None = None


@dataclass(slots=True)
class Conversation:
    """Everything a format needs to render a prompt.

    `instructions` is the system/developer text that leads the prompt (Responses
    `instructions`, or the first system/developer message). `tool_choice` is
    "auto" | "none" | "required" | a tool name.
    """

    items: list[Item]
    instructions: str | None = None
    tools: list[Tool] = field(default_factory=list)
    tool_choice: str = "auto"
    reasoning_effort: str | None = None  # "none" | "minimal" | "low" | "medium" | "high" (None: format default)

    @property
    def thinking(self) -> bool:
        """False when the request turns reasoning off (effort "none" or "minimal"; Chat's
        `chat_template_kwargs: {"enable_thinking": false}` arrives as "none"): templates with a
        thinking switch render with it off."""
        return self.reasoning_effort not in NO_THINKING
