"""Anthropic Messages request body → canonical `Conversation` + sampling options.

Validated once, here, against pydantic models of the fields the gateway acts on (shaped
after the `anthropic` SDK's `MessageCreateParams`); fields it has no use for
(`cache_control`, `context_management`, `output_config`, beta flags) are accepted and
ignored, as a local model has no use for them. Claude Code sends the whole history on every
request: the turn is keyed to its session (the `x-claude-code-session-id` header, else the
`session_id` in `metadata.user_id`; a subagent's `x-claude-code-agent-id` keys its own session
within it), whose exact tokens continue the next prompt; a
`thinking` block's `signature` is the gateway's sealed reasoning blob
(gateway/adapters/reasoning_blob.py), so the exact text — and, when the whole turn was
sealed with it, the turn's generated ids — come back even when no cache holds them.

Claude Code's first system block is its billing line, `x-anthropic-billing-header:
cc_version=…; cc_entrypoint=…; cch=<nonce>;`, with a new nonce on every request (native builds
≥ 2.1.36). It is metadata Anthropic's API reads and the model never sees; rendered, it would
make every turn's prompt differ from the last one's a few dozen tokens in, so the session's
exact tokens could not be continued and vLLM would prefill the whole context again. It is
dropped here, as vLLM's own Anthropic server does (vllm/entrypoints/anthropic/serving.py,
`_convert_system_message`, vllm-project/vllm#36829).
"""

from __future__ import annotations

import json
import logging
from array import array
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError

from gateway.adapters import reasoning_blob
from gateway.adapters._images import anthropic_image
from gateway.core.conversation import Conversation, Item, Message, Reasoning, Tool, ToolCall, ToolOutput, with_parts
from gateway.core.errors import invalid_request
from gateway.core.image import Image
from gateway.core.sampling import SamplingOptions

__all__ = ["MessagesRequest", "parse_messages_request"]

log = logging.getLogger(__name__)

BILLING_LINE = "x-anthropic-billing-header"  # how Claude Code's billing block starts


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextBlock(_Model):
    type: Literal["text"]
    text: str


class ThinkingBlock(_Model):
    type: Literal["thinking"]
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(_Model):
    type: Literal["redacted_thinking"]
    data: str


class ToolUseBlock(_Model):
    type: Literal["tool_use"]
    id: str
    name: str
    input: Any = Field(default_factory=dict)


class ToolResultBlock(_Model):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[dict[str, Any]] = ""
    is_error: bool | None = None


class ImageBlock(_Model):
    type: Literal["image"]
    source: dict[str, Any]


class OtherBlock(_Model):
    """Images, documents, server tools: named in a clear 400 below."""

    type: str


_KNOWN = frozenset({"text", "thinking", "redacted_thinking", "tool_use", "tool_result", "image"})


def _block_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if isinstance(kind, str) and kind in _KNOWN else "other"  # a list or dict `type`: a 400 below


Block = Annotated[Annotated[TextBlock, Tag("text")] | Annotated[ThinkingBlock, Tag("thinking")]
                  | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")]
                  | Annotated[ToolUseBlock, Tag("tool_use")] | Annotated[ToolResultBlock, Tag("tool_result")]
                  | Annotated[ImageBlock, Tag("image")]
                  | Annotated[OtherBlock, Tag("other")], Discriminator(_block_tag)]


class MessageParam(_Model):
    role: Literal["user", "assistant", "system"]  # Claude Code puts its environment in a mid-history system message
    content: str | list[Block]


class ToolParam(_Model):
    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    type: str | None = None


class ToolChoice(_Model):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None


class ThinkingConfig(_Model):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = None
    display: str | None = None


class MessagesBody(_Model):
    model: str
    messages: list[MessageParam]
    max_tokens: int = Field(ge=1)
    system: str | list[TextBlock] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    metadata: dict[str, Any] | None = None
    return_token_ids: bool = False  # vLLM's extension, as on Chat Completions


class CountTokensBody(MessagesBody):
    max_tokens: int = Field(default=1, ge=1)


@dataclass(slots=True)
class MessagesRequest:
    conversation: Conversation
    sampling: SamplingOptions
    model: str
    stream: bool
    session_key: str | None  # the session exact tokens are kept under
    show_thinking: bool = True  # `thinking.display: "omitted"`: the text goes in the signature only
    generated: list[tuple[Reasoning, array]] = field(default_factory=list)
    return_token_ids: bool = False  # the message carries its exact ids, logprobs and weight versions


def parse_messages_request(body: Any, *, session_header: str | None = None, agent_header: str | None = None,
                           count_only: bool = False) -> MessagesRequest:
    """`session_header`/`agent_header`: Claude Code's `x-claude-code-session-id` and (a
    subagent's) `x-claude-code-agent-id`."""
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.")
    try:
        parsed = (CountTokensBody if count_only else MessagesBody).model_validate(body)
    except ValidationError as exc:
        first = max(exc.errors(), key=lambda error: len(error["loc"]))  # the deepest: a union's own branch
        where = ".".join(str(part) for part in first["loc"])
        raise invalid_request(f"{where}: {first['msg']}", param=where) from None
    if parsed.stop_sequences:
        raise invalid_request("stop_sequences are not supported by this token-level gateway (it stops on the "
                              "model's own end-of-turn tokens).", param="stop_sequences")
    if not parsed.messages:
        raise invalid_request("messages: at least one message is required.", param="messages")
    generated: list[tuple[Reasoning, array]] = []
    items: list[Item] = []
    names: dict[str, str] = {}
    for i, message in enumerate(parsed.messages):
        items += _message(message, f"messages.{i}", names, generated)
    tools = [Tool(name=t.name, description=t.description, parameters=t.input_schema)
             for t in parsed.tools or () if t.type in (None, "custom")]
    tool_choice = _tool_choice(parsed.tool_choice)
    if tool_choice == "none":
        tools = []
    conversation = Conversation(items=items, instructions=_system(parsed.system), tools=tools,
                                tool_choice=tool_choice)
    sampling = SamplingOptions(max_tokens=parsed.max_tokens, temperature=parsed.temperature, top_p=parsed.top_p,
                               top_k=parsed.top_k, logprobs=0 if parsed.return_token_ids else None)
    show = parsed.thinking is None or parsed.thinking.display != "omitted"
    return MessagesRequest(conversation, sampling, parsed.model, parsed.stream,
                           _session(session_header, agent_header, parsed.metadata), show, generated,
                           parsed.return_token_ids)


def _system(system: str | list[TextBlock] | None) -> str | None:
    if system is None or isinstance(system, str):
        return system or None
    return "\n".join(block.text for block in system if not block.text.startswith(BILLING_LINE)) or None


def _message(message: MessageParam, param: str, names: dict[str, str],
             generated: list[tuple[Reasoning, array]]) -> list[Item]:
    blocks = [TextBlock(type="text", text=message.content)] if isinstance(message.content, str) else message.content
    if message.role == "system":
        return [Message(role="system", text=_texts(blocks, param))]
    items: list[Item] = []
    texts: list[str | Image] = []  # consecutive text (and a user's image) blocks make one message

    def flush() -> None:
        if texts:
            text, parts = with_parts(texts)
            items.append(Message(role=message.role, text=text, parts=parts))
            texts.clear()

    for j, block in enumerate(blocks):
        where = f"{param}.content.{j}"
        if isinstance(block, TextBlock):
            texts.append(block.text)
            continue
        if message.role == "user" and isinstance(block, ImageBlock):
            texts.append(anthropic_image(block.source, where))
            continue
        flush()
        if message.role == "assistant" and isinstance(block, ThinkingBlock):
            items.append(_thinking(block, where, generated))
        elif message.role == "assistant" and isinstance(block, RedactedThinkingBlock):
            continue  # another provider's opaque reasoning: nothing a local model can read
        elif message.role == "assistant" and isinstance(block, ToolUseBlock):
            names[block.id] = block.name
            items.append(ToolCall(call_id=block.id, name=block.name, arguments=_arguments(block.input)))
        elif message.role == "user" and isinstance(block, ToolResultBlock):
            if block.tool_use_id not in names:
                raise invalid_request(f"{where}.tool_use_id: no earlier tool_use has id {block.tool_use_id!r}.",
                                      param=f"{where}.tool_use_id")
            text, parts = with_parts(_result(block, where))
            items.append(ToolOutput(call_id=block.tool_use_id, output=text, name=names[block.tool_use_id],
                                    parts=parts))
        else:
            raise invalid_request(f"{where}: a {message.role} message cannot hold a {block.type!r} block here "
                                  f"(this gateway serves a text-only model).", param=f"{where}.type")
    flush()
    return items


def _thinking(block: ThinkingBlock, where: str, generated: list[tuple[Reasoning, array]]) -> Reasoning:
    """The exact text (and the turn's ids) from the gateway's own signature; else the block's text."""
    sealed = reasoning_blob.unseal(block.signature) if block.signature else None
    if sealed is None:
        if block.signature:
            log.warning("ignoring %s.signature: not a signature of this gateway", where)
        return Reasoning(text=block.thinking)
    item = Reasoning(text=sealed.text)
    if sealed.token_ids is not None:
        generated.append((item, sealed.token_ids))
    return item


def _arguments(value: Any) -> str:
    """A tool_use `input` as the JSON text the model writes (Qwen: `json.dumps` spacing)."""
    return json.dumps(value, ensure_ascii=False)


def _texts(blocks: list[Any], where: str) -> str:
    texts = []
    for j, block in enumerate(blocks):
        if not isinstance(block, TextBlock):
            raise invalid_request(f"{where}.content.{j}: expected a text block.", param=f"{where}.content.{j}")
        if not block.text.startswith(BILLING_LINE):
            texts.append(block.text)
    return "".join(texts)


def _result(block: ToolResultBlock, where: str) -> list[str | Image]:
    """A tool result's text blocks (joined by newlines) and images, in order."""
    if isinstance(block.content, str):
        return [block.content]
    found: list[str | Image] = []
    for j, part in enumerate(block.content):
        if part.get("type") == "image":
            found.append(anthropic_image(part.get("source"), f"{where}.content.{j}"))
            continue
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise invalid_request(f"{where}.content.{j}: tool results hold text and images only here.",
                                  param=f"{where}.content.{j}")
        if found and isinstance(found[-1], str):
            found.append("\n")
        found.append(part["text"])
    return found


def _tool_choice(choice: ToolChoice | None) -> str:
    if choice is None or choice.type == "auto":
        return "auto"
    if choice.type == "any":
        return "required"
    if choice.type == "none":
        return "none"
    if not choice.name:
        raise invalid_request("tool_choice.name: required when tool_choice.type is 'tool'.", param="tool_choice.name")
    return choice.name


def _session(header: str | None, agent: str | None, metadata: dict[str, Any] | None) -> str | None:
    """Claude Code's session key: a subagent's own within its session (its history is not its
    parent's), else the session's."""
    session = _session_id(header, metadata)
    return f"{session}:agent:{agent}" if session is not None and agent else session


def _session_id(header: str | None, metadata: dict[str, Any] | None) -> str | None:
    """Claude Code's session id: its header, else `metadata.user_id` (a JSON object with a
    `session_id` in Claude Code 2.x; any other string is a key as it is)."""
    if header:
        return f"claude:{header}"
    user_id = (metadata or {}).get("user_id")
    if not isinstance(user_id, str) or not user_id:
        return None
    try:
        decoded = json.loads(user_id)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and isinstance(decoded.get("session_id"), str):
        return f"claude:{decoded['session_id']}"
    return f"claude:{user_id}"
