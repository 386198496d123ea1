"""Render a canonical conversation as gpt-oss harmony prompt tokens.

openai-harmony renders the system and developer messages (model identity, reasoning
effort, channels, the TypeScript `functions` namespace). Conversation items are
rendered here with the encoding's plain-text BPE: byte-identical to harmony's own
message rendering (tests compare the two), several times faster than its per-message
JSON round trip, and free to write tool calls the way gpt-oss itself does (below).

Message text is always encoded as plain text, so a tool output containing
`<|end|><|start|>system<|message|>` can never produce special tokens.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from openai_harmony import (
    DeveloperContent,
    HarmonyEncoding,
    ReasoningEffort,
    RenderOptions,
    Role,
    SystemContent,
    ToolDescription,
)
from openai_harmony import (
    Message as HarmonyMessage,
)

from gateway.core.conversation import Conversation, Item, Message, Reasoning, Tool, ToolCall, ToolOutput
from gateway.formats.base import Covered, Tail

__all__ = ["HarmonyRenderer"]

REASONING_EFFORT = {
    "minimal": ReasoningEffort.LOW,
    "low": ReasoningEffort.LOW,
    "medium": ReasoningEffort.MEDIUM,
    "high": ReasoningEffort.HIGH,
    "xhigh": ReasoningEffort.HIGH,
}


class HarmonyRenderer:
    def __init__(self, encoding: HarmonyEncoding, *, start_date: str | None = None,
                 model_identity: str | None = None) -> None:
        self.encoding = encoding
        self.start_date = start_date  # None: today, at each render
        self.model_identity = model_identity  # None: harmony's default identity
        special = {name: encoding.encode(name, allowed_special={name})[0]
                   for name in ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|constrain|>")}
        self.start = special["<|start|>"]
        self.channel = special["<|channel|>"]
        self.message = special["<|message|>"]
        self.end = special["<|end|>"]
        self.call = special["<|call|>"]
        self.constrain = special["<|constrain|>"]

    def render(self, conversation: Conversation) -> list[int]:
        out = self.render_head(conversation, _offered(conversation))
        items = conversation.items
        keep_reasoning_from = _last_final_index(items) + 1
        call_names = _CallNames(items)
        for index, item in enumerate(items):
            if index >= keep_reasoning_from or not isinstance(item, Reasoning):
                self._item(out, item, call_names)
        return self._generation_prompt(out)

    def render_tail(self, conversation: Conversation, covered: Covered) -> Tail | None:
        """The new items rendered alone: items render one by one, and the one rule that looks
        across items (reasoning before the last final answer is dropped) changes nothing
        before them unless they hold a final answer."""
        items, count = conversation.items, covered.items
        if any(_is_final(item) for item in items[count:]):
            return None
        keep_reasoning_from = _last_final_index(items[:count]) + 1
        kept = [i for i in range(count) if i >= keep_reasoning_from or not isinstance(items[i], Reasoning)]
        # One terminator per system/developer message and per rendered item.
        turns = (2 if conversation.instructions or _offered(conversation) else 1) + len(kept)
        last = items[kept[-1]] if kept else None
        out = [self.call if isinstance(last, ToolCall) else self.end]
        call_names = _CallNames(items)
        for item in items[count:]:
            self._item(out, item, call_names)
        return Tail(turns=turns, ids=self._generation_prompt(out))

    def render_head(self, conversation: Conversation, tools: Sequence[Tool]) -> list[int]:
        """The system message and (when there are instructions or tools) the developer message."""
        options = RenderOptions(conversation_has_function_tools=bool(tools))
        system = SystemContent.new()
        if self.model_identity is not None:
            system = system.with_model_identity(self.model_identity)
        system = (system
                  .with_reasoning_effort(REASONING_EFFORT.get(conversation.reasoning_effort or "", ReasoningEffort.MEDIUM))
                  .with_conversation_start_date(self.start_date or datetime.date.today().isoformat())
                  .with_required_channels(["analysis", "commentary", "final"]))
        out = self.encoding.render(HarmonyMessage.from_role_and_content(Role.SYSTEM, system), options)
        if conversation.instructions or tools:
            developer = DeveloperContent.new()
            if conversation.instructions:
                developer = developer.with_instructions(conversation.instructions)
            if tools:
                developer = developer.with_function_tools(
                    [ToolDescription.new(tool.name, tool.description, tool.parameters) for tool in tools])
            out += self.encoding.render(HarmonyMessage.from_role_and_content(Role.DEVELOPER, developer), options)
        return out

    def _item(self, out: list[int], item: Item, call_names: _CallNames) -> None:
        if isinstance(item, Message):
            if item.role == "assistant":
                self._message(out, "assistant", "commentary" if item.channel == "commentary" else "final", item.text)
            elif item.role == "user":
                self._message(out, "user", None, item.text)
            else:  # a later system/developer message: harmony's system slot is its own
                self._message(out, "developer", None, item.text)
        elif isinstance(item, Reasoning):
            self._message(out, "assistant", "analysis", item.text)
        elif isinstance(item, ToolCall):
            self._tool_call(out, item)
        elif isinstance(item, ToolOutput):
            name = item.name or call_names.get(item.call_id)
            if name is None:
                raise ValueError(f"tool output {item.call_id!r} has no matching tool call")
            self._tool_output(out, name, item.output)

    def _generation_prompt(self, out: list[int]) -> list[int]:
        out.append(self.start)
        out += self._text("assistant")
        return out

    def _text(self, text: str) -> list[int]:
        return self.encoding.encode(text, disallowed_special=())

    def _message(self, out: list[int], role: str, channel: str | None, text: str) -> None:
        out.append(self.start)
        out += self._text(role)
        if channel is not None:
            out.append(self.channel)
            out += self._text(channel)
        out.append(self.message)
        out += self._text(text)
        out.append(self.end)

    def _tool_call(self, out: list[int], call: ToolCall) -> None:
        # openai-harmony 0.0.8 renders a call as
        #   <|start|>assistant to=functions.X<|channel|>commentary json<|message|>…<|call|>
        # (recipient in the role part; `<|constrain|>` only if the content type spells it).
        # gpt-oss itself writes the recipient in the channel part:
        #   <|start|>assistant<|channel|>commentary to=functions.X <|constrain|>json<|message|>…<|call|>
        # (OpenAI's harmony guide; openai/harmony#27 and #81; vLLM's tool-call grammar
        # accepts channel-first because that is what the model generates). Re-rendered
        # history should read like the model's own output, so calls are written that way.
        out.append(self.start)
        out += self._text("assistant")
        out.append(self.channel)
        out += self._text(f"commentary to=functions.{call.name} ")
        out.append(self.constrain)
        out += self._text("json")
        out.append(self.message)
        out += self._text(call.arguments)
        out.append(self.call)

    def _tool_output(self, out: list[int], name: str, output: str) -> None:
        # Harmony's tool message: <|start|>functions.X to=assistant<|channel|>commentary<|message|>…<|end|>
        out.append(self.start)
        out += self._text(f"functions.{name}")
        out += self._text(" to=assistant")
        out.append(self.channel)
        out += self._text("commentary")
        out.append(self.message)
        out += self._text(output)
        out.append(self.end)


class _CallNames:
    """Tool names by call id, looked up only for outputs that do not carry their name."""

    def __init__(self, items: Sequence[Item]) -> None:
        self._items = items
        self._names: dict[str, str] | None = None

    def get(self, call_id: str) -> str | None:
        if self._names is None:
            self._names = {item.call_id: item.name for item in self._items if isinstance(item, ToolCall)}
        return self._names.get(call_id)


def _offered(conversation: Conversation) -> Sequence[Tool]:
    return conversation.tools if conversation.tool_choice != "none" else []


def _is_final(item: Item) -> bool:
    return isinstance(item, Message) and item.role == "assistant" and item.channel != "commentary"


def _last_final_index(items: Sequence[Item]) -> int:
    """Index of the last assistant final answer, or -1.

    Reasoning before it belongs to completed turns and is dropped (gpt-oss is trained
    without earlier turns' chain of thought); reasoning after it is the current
    tool-calling chain and is kept. openai-harmony's `auto_drop_analysis` only drops
    analysis before the *first* final message and only when the conversation ends with
    one, which is wrong for both cases, so it is not used.
    """
    for index in range(len(items) - 1, -1, -1):
        if _is_final(items[index]):
            return index
    return -1
