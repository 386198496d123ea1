"""Chat Completions request body → canonical `Conversation` + sampling options."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from gateway.adapters import _output_fields as output_fields
from gateway.adapters._codex_tools import function_tool
from gateway.adapters._images import chat_image
from gateway.adapters._sampling_fields import parse_sampling
from gateway.adapters._tool_schema import ChatFunctionTool
from gateway.adapters.chat import _vllm_fields as vllm_fields
from gateway.adapters.request_schema import ChatBody, ChatImagePart, ChatMessage, Content, validate
from gateway.adapters.responses.input import content_part, content_text
from gateway.core.conversation import Conversation, Item, Message, Reasoning, ToolCall, ToolOutput, with_parts
from gateway.core.errors import invalid_request
from gateway.core.image import Image
from gateway.core.sampling import SamplingOptions
from gateway.tokenfix.state import TokenState

__all__ = ["ChatRequest", "parse_chat_request", "unwrap_extra_body"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ChatRequest:
    conversation: Conversation
    sampling: SamplingOptions
    model: str
    stream: bool
    include_usage: bool
    logprobs: bool
    return_token_ids: bool
    tokens_as_ids: bool = False  # logprobs `token`s are "token_id:N" (vLLM's return_tokens_as_token_ids)
    prompt_cache_key: str | None = None
    client_prefix: TokenState | None = None  # ids on the last assistant message (NeMo-RL convention)
    n: int = 1  # choices: n generations of the same prompt


def parse_chat_request(body: Any, *, tokens_as_ids: bool = False) -> ChatRequest:
    """`tokens_as_ids`: the server's `--return-tokens-as-token-ids`, for requests that do not say."""
    chat = validate(ChatBody, body)  # every field's type and range: what is read below is checked
    if not chat.messages:
        raise invalid_request("'messages' must not be empty.", param="messages", code="empty_input")
    items: list[Item] = []
    names: dict[str, str] = {}
    last_assistant: _Placed | None = None
    for i, message in enumerate(chat.messages):
        start = len(items)
        items.extend(_message(message, f"messages[{i}]", names))
        if message.role == "assistant":
            last_assistant = _Placed(start, len(items), message, f"messages[{i}]")
    instructions = None
    if items and isinstance(items[0], Message) and items[0].role in ("system", "developer"):
        instructions = items.pop(0).text
    tools = [function_tool(tool.function) for tool in chat.tools or () if isinstance(tool, ChatFunctionTool)]
    tool_choice, allowed = output_fields.tool_choice(chat.tool_choice)
    effort = chat.reasoning_effort
    switches = chat.chat_template_kwargs or {}
    if effort is None and False in (switches.get("enable_thinking"), switches.get("thinking")):
        effort = "none"  # vLLM's per-request thinking switch (Kimi-K3's and DeepSeek's `thinking`), as that effort
    conversation = Conversation(items=items, instructions=instructions, tools=tools if tool_choice != "none" else [],
                                tool_choice=tool_choice, reasoning_effort=effort)
    prefix = None
    if last_assistant is not None:
        prefix = _client_prefix(conversation, last_assistant, shift=instructions is not None,
                                first=last_assistant.message is chat.messages[0])
    return ChatRequest(conversation=conversation, sampling=_sampling(chat, tool_choice, allowed), model=chat.model,
                       stream=bool(chat.stream), include_usage=bool((chat.stream_options or {}).get("include_usage")),
                       logprobs=bool(chat.logprobs), return_token_ids=bool(chat.return_token_ids),
                       tokens_as_ids=vllm_fields.tokens_as_ids(chat, server_default=tokens_as_ids),
                       prompt_cache_key=chat.prompt_cache_key, client_prefix=prefix, n=chat.n or 1)


@dataclass(frozen=True, slots=True)
class _Placed:
    """An assistant message and where its items are: those before it and up to it."""

    start: int
    covered: int
    message: ChatMessage
    param: str


def _sampling(chat: ChatBody, tool_choice: str, allowed: tuple[str, ...] | None) -> SamplingOptions:
    max_tokens = chat.max_completion_tokens if chat.max_completion_tokens is not None else chat.max_tokens
    rollout = chat.rollout_id is not None  # trajectories carry the sampled tokens' logprobs
    vllm_fields.check_logprobs(chat)
    sampling = parse_sampling(chat, max_tokens=max_tokens, logprobs=bool(chat.logprobs or chat.return_token_ids)
                              or rollout, logit_bias=chat.logit_bias)
    sampling.stop = (chat.stop,) if isinstance(chat.stop, str) else tuple(chat.stop) if chat.stop else None
    vllm_fields.apply(chat, sampling)
    sampling.constraint = output_fields.output_constraint(tool_choice, allowed, parallel=chat.parallel_tool_calls,
                                                          max_calls=None, answer=chat.response_format,
                                                          answer_param="response_format")
    return sampling


def _client_prefix(conversation: Conversation, placed: _Placed, *, shift: bool, first: bool) -> TokenState | None:
    """The exact ids an assistant message carries (NeMo-RL's convention), as the prefix of the
    history up to it; `shift`: the instructions were taken off the items' front."""
    message, param = placed.message, placed.param
    prompt_ids, generated = message.prompt_token_ids, message.generation_token_ids
    if prompt_ids is None and generated is None:
        return None
    if first:
        raise invalid_request(f"'{param}.prompt_token_ids': an assistant message's ids are the prompt of the "
                              f"history before it and what the model generated from it, but '{param}' has no "
                              f"history before it. Put the messages that prompted it first, or send no ids.",
                              param=f"{param}.prompt_token_ids", code="invalid_value")
    if prompt_ids and generated:
        return TokenState.build(conversation, conversation.items[:placed.covered - shift], prompt_ids, generated,
                                prompt_items=placed.start - shift)
    if prompt_ids or generated:  # both empty: no ids, the history is rendered from its text
        empty, other = ("generation_token_ids", generated) if prompt_ids else ("prompt_token_ids", prompt_ids)
        raise invalid_request(f"'{param}.{empty}' is {'missing' if other is None else 'empty'}: the exact ids of "
                              f"a call are its prompt and its generation, both non-empty. Send both, or neither.",
                              param=f"{param}.{empty}", code="invalid_value")
    return None


def unwrap_extra_body(body: Any) -> Any:
    """A literal `extra_body` object (the openai SDK's name for extra fields, sent as a field by
    proxies such as rLLM's model gateway) read as the top-level fields it stands for; the body's
    own win."""
    if isinstance(body, dict) and isinstance(extra := body.get("extra_body"), dict):
        return {**extra, **{key: value for key, value in body.items() if key != "extra_body"}}
    return body


def _message(message: ChatMessage, param: str, names: dict[str, str]) -> list[Item]:
    role = message.role
    if role == "user":
        text, parts = with_parts(_content(message.content or "", f"{param}.content"))
        return [Message(role=role, text=text, parts=parts)]
    if role in ("system", "developer"):
        return [Message(role=role, text=content_text(message.content or "", f"{param}.content"))]
    if role == "tool":
        call_id = message.tool_call_id
        if call_id is None:
            raise invalid_request(f"Missing required parameter: '{param}.tool_call_id'.", param=f"{param}.tool_call_id",
                                  code="missing_required_parameter")
        if call_id not in names:
            raise invalid_request(f"No assistant tool call has id {call_id!r} (at '{param}').",
                                  param=f"{param}.tool_call_id")
        text, parts = with_parts(_content(message.content or "", f"{param}.content"))
        return [ToolOutput(call_id=call_id, output=text, name=names.get(call_id), parts=parts)]
    items: list[Item] = []  # an assistant's
    reasoning = message.reasoning or message.reasoning_content
    if reasoning:
        items.append(Reasoning(text=reasoning))
    if message.content:
        items.append(Message(role="assistant", text=content_text(message.content, f"{param}.content")))
    for call in message.tool_calls or ():
        names[call.id] = call.function.name
        items.append(ToolCall(call_id=call.id, name=call.function.name, arguments=call.function.arguments))
    return items


def _content(content: Content, param: str) -> list[str | Image]:
    """User and tool content in order: text, and `image_url` parts (a data URL)."""
    if isinstance(content, str):
        return [content]
    return [chat_image(part, f"{param}[{j}]") if isinstance(part, ChatImagePart)
            else content_part(part, f"{param}[{j}]", images=False) for j, part in enumerate(content)]
