"""Responses API request body → canonical `Conversation` + sampling options.

Accepts what the OpenAI SDK and Codex send: `input` as a string or a list of items
(messages with content parts, reasoning, function calls and their outputs, Codex's custom
and local shell calls), leading system/developer text as the instructions, function tools
and Codex's namespace and custom tools (gateway/adapters/_codex_tools.py).
"""

from __future__ import annotations

import json
import logging
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.adapters import _output_fields as output_fields
from gateway.adapters import reasoning_blob
from gateway.adapters._codex_tools import LOCAL_SHELL, custom_arguments, flat_name, offered_tools
from gateway.adapters._images import responses_image
from gateway.adapters._sampling_fields import parse_sampling
from gateway.adapters._tool_schema import FunctionTool, McpServerTool, ResponsesTool
from gateway.adapters.request_schema import (
    CompactionItem,
    Content,
    CustomToolCallItem,
    FunctionCallItem,
    ImagePart,
    InputItem,
    LocalShellCallItem,
    LocalShellOutputItem,
    MessageItem,
    OtherItem,
    Part,
    ReasoningItem,
    RefusalPart,
    ResponsesBody,
    TextPart,
    ToolOutputItem,
    validate,
)
from gateway.adapters.responses import _mcp_tools as mcp_tools
from gateway.adapters.responses import compaction
from gateway.adapters.responses._mcp_tools import MCP_ITEMS, Approval, McpPlan
from gateway.core.conversation import Conversation, Item, Message, Reasoning, ToolCall, ToolOutput, with_parts
from gateway.core.errors import invalid_request
from gateway.core.image import Image
from gateway.core.sampling import SamplingOptions
from gateway.upstream.mcp import McpTool

__all__ = ["ResponsesRequest", "content_part", "content_text", "input_items", "parse_request"]

log = logging.getLogger(__name__)

@dataclass(slots=True)
class ResponsesRequest:
    conversation: Conversation
    sampling: SamplingOptions
    model: str
    stream: bool
    echo: dict[str, Any]  # fields repeated in the Response object, for the client only
    store: bool = True  # OpenAI's default; Codex sends false
    prompt_cache_key: str | None = None
    return_token_ids: bool = False
    text_logprobs: bool = False  # `include` asked for message.output_text.logprobs
    background: bool = False  # run as a task, answer `queued` now (gateway/server/routes/stored_responses.py)
    truncate: bool = False  # `truncation: "auto"`: the oldest exchanges go when the history does not fit
    compact: bool = False  # the input ended with a compaction_trigger (gateway/adapters/responses/compaction.py)
    tools: list[ResponsesTool] = field(default_factory=list)
    # Reasoning items whose blob holds the ids their turn generated (for gateway/tokenfix/restore.py).
    generated: list[tuple[Reasoning, array | str]] = field(default_factory=list)
    # Remote MCP tools (gateway/adapters/responses/_mcp_tools.py): listings the context holds, by server label…
    listed: dict[str, list[McpTool]] = field(default_factory=dict)
    approvals: list[Approval] = field(default_factory=list)  # …the input's answers to approval requests…
    mcp: McpPlan | None = None  # …and, once planned, what the response may call


def parse_request(body: Any, earlier_calls: Mapping[str, str] | None = None) -> ResponsesRequest:
    """`earlier_calls`: tool names by call_id of calls made before this input (a WebSocket
    continuation's history), which its tool outputs may answer."""
    request = validate(ResponsesBody, body)  # every field's type and range: what is read below is checked
    generated: list[tuple[Reasoning, array | str]] = []
    found, compact = compaction.take_trigger(request.input)
    given = found if isinstance(found, list) else []  # the input's items (a string is one message)
    # A continuation may send the trigger alone.
    items = input_items(found, earlier_calls or {}, generated) if found or not compact else []
    if compact:
        items.append(compaction.summary_prompt())
    instructions = request.instructions if request.instructions is not None else _take_leading_instructions(items)
    tool_choice, allowed = output_fields.tool_choice(request.tool_choice)
    tools = [offered for tool in request.tools or () for offered in offered_tools(tool)] if tool_choice != "none" else []
    effort = request.reasoning.effort if request.reasoning is not None else None
    conversation = Conversation(items=items, instructions=instructions, tools=tools, tool_choice=tool_choice,
                                reasoning_effort=effort)
    return_token_ids = bool(request.return_token_ids)
    text_logprobs = "message.output_text.logprobs" in (request.include or ()) or request.top_logprobs is not None
    sampling = parse_sampling(request, max_tokens=request.max_output_tokens, logprobs=return_token_ids or text_logprobs)
    sampling.constraint = output_fields.output_constraint(
        tool_choice, allowed, parallel=request.parallel_tool_calls, max_calls=request.max_tool_calls,
        answer=request.text.format if request.text is not None else None, answer_param="text.format")
    store, background = request.store is not False, bool(request.background)
    if background and not store:
        raise invalid_request("'background': true needs 'store': true (its result is stored to be retrieved).",
                              param="background", code="unsupported_value")
    return ResponsesRequest(
        conversation=conversation, sampling=sampling, model=request.model, stream=bool(request.stream),
        echo=_echo(request, sampling, body.get("tools") or ()), store=store, prompt_cache_key=request.prompt_cache_key,
        return_token_ids=return_token_ids, text_logprobs=text_logprobs, background=background,
        tools=request.tools or [], generated=generated, truncate=request.truncation == "auto",
        listed=mcp_tools.listed_in(given), approvals=mcp_tools.approvals_in(given), compact=compact)


def _echo(request: ResponsesBody, sampling: SamplingOptions, sent_tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The request's fields as the Response object repeats them, with the values this gateway uses
    where the request left one out (OpenAI sends them all, and Open Responses requires them);
    `sent_tools`: the body's own `tools`, which the model validated."""
    choice = request.tool_choice
    echo = {
        "instructions": request.instructions,
        "tools": [_echoed_tool(tool, sent) for tool, sent in zip(request.tools or (), sent_tools, strict=True)],
        "tool_choice": choice if isinstance(choice, str) else choice.model_dump(exclude_unset=True) if choice else "auto",
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_output_tokens": request.max_output_tokens,
        "metadata": request.metadata or {},
        "reasoning": {"effort": request.reasoning.effort if request.reasoning else None,
                      "summary": request.reasoning.summary if request.reasoning else None},
        "text": request.text.model_dump(exclude_unset=True, by_alias=True) if request.text else {"format": {"type": "text"}},
        "store": request.store is not False,
        "previous_response_id": request.previous_response_id,
        "prompt_cache_key": request.prompt_cache_key,
        "truncation": request.truncation or "disabled",
        "presence_penalty": sampling.presence_penalty or 0.0,
        "frequency_penalty": sampling.frequency_penalty or 0.0,
        "top_logprobs": request.top_logprobs or 0,
        "max_tool_calls": request.max_tool_calls,
        "safety_identifier": request.safety_identifier,
        "service_tier": sampling.tier,  # the tier that serves it (gateway/core/service_tier.py)
        "background": bool(request.background),
    }
    if request.user is not None:
        echo["user"] = request.user
    return echo


def _echoed_tool(tool: ResponsesTool, sent: dict[str, Any]) -> dict[str, Any]:
    """A tool as the client sent it (`sent`: its validated JSON, not dumped again from the model),
    as the Response object shows it: a function's `strict` and `parameters` always there, an MCP
    server's credentials never."""
    if isinstance(tool, FunctionTool):
        return {**sent, "strict": tool.strict, "parameters": tool.parameters}
    if isinstance(tool, McpServerTool):
        return mcp_tools.echoed(sent)
    return dict(sent)


def input_items(found: str | Sequence[InputItem], earlier_calls: Mapping[str, str],
                generated: list[tuple[Reasoning, array | str]], field: str = "input") -> list[Item]:
    """Validated `input` (gateway/adapters/request_schema.py) as conversation items; `earlier_calls`
    as in `parse_request`, and the reasoning items whose blob holds their turn's generated ids
    appended to `generated`. `field`: where the items are in the request, as a 400 names them."""
    if isinstance(found, str):
        if not found:
            raise invalid_request(f"'{field}' must not be empty.", param=field, code="empty_input")
        return [Message(role="user", text=found)]
    if not found:
        raise invalid_request(f"'{field}' must not be empty.", param=field, code="empty_input")
    items: list[Item] = []
    call_names = dict(earlier_calls)
    for i, model in enumerate(found):
        if isinstance(model, MCP_ITEMS):
            hosted = mcp_tools.input_items(model)
            call_names.update((call.call_id, call.name) for call in hosted if isinstance(call, ToolCall))
            items += hosted
            continue
        item = _item(model, field, i, generated)
        if isinstance(item, ToolCall):
            call_names[item.call_id] = item.name
        elif isinstance(item, ToolOutput):
            item.name = call_names.get(item.call_id)
            if item.name is None:
                raise invalid_request(f"No tool call found for function call output with call_id "
                                      f"{item.call_id!r} at '{field}[{i}]'.", param=f"{field}[{i}].call_id")
        items.append(item)
    return items


def _item(model: InputItem, field: str, i: int, generated: list[tuple[Reasoning, array | str]]) -> Item:
    """One non-MCP item, `field[i]`; the kinds Codex resends most first, without a param to name
    when nothing can be wrong with them."""
    if isinstance(model, FunctionCallItem):
        return ToolCall(call_id=model.call_id, name=flat_name(model.namespace, model.name), arguments=model.arguments)
    if isinstance(model, ToolOutputItem) and type(model.output) is str:
        return ToolOutput(call_id=model.call_id, output=model.output)
    param = f"{field}[{i}]"
    if isinstance(model, ToolOutputItem):
        text, parts = with_parts(_output(model.output, f"{param}.output"))
        return ToolOutput(call_id=model.call_id, output=text, parts=parts)
    if isinstance(model, ReasoningItem):
        reasoning, ids = _reasoning(model, param)
        if ids is not None:
            generated.append((reasoning, ids))
        return reasoning
    if isinstance(model, MessageItem):
        text, parts = with_parts(_content(model.content, f"{param}.content", images=model.role == "user"))
        channel = "commentary" if model.role == "assistant" and model.phase == "commentary" else None
        return Message(role=model.role, text=text, channel=channel, parts=parts)
    if isinstance(model, CustomToolCallItem):
        return ToolCall(call_id=model.call_id, name=model.name, arguments=custom_arguments(model.input))
    if isinstance(model, LocalShellCallItem):
        return ToolCall(call_id=_local_shell_call_id(model, param), name=LOCAL_SHELL,
                        arguments=json.dumps(model.action, ensure_ascii=False))
    if isinstance(model, LocalShellOutputItem):
        return ToolOutput(call_id=_local_shell_call_id(model, param),
                          output=_output_text(model.output, f"{param}.output"))
    if isinstance(model, CompactionItem):
        return compaction.summary_message(model, param)
    kind = model.type if isinstance(model, OtherItem) else None  # the one kind left
    if kind == "item_reference":
        raise invalid_request(f"'{param}' is an item_reference; this gateway does not store items "
                              f"(send the item itself).", param=param, code="unsupported_item")
    raise invalid_request(f"Unsupported input item type {kind!r} at '{param}'.", param=f"{param}.type",
                          code="unsupported_item")


def _reasoning(model: ReasoningItem, param: str) -> tuple[Reasoning, array | str | None]:
    """The exact text from the gateway's own `encrypted_content` blob when there is one (clients
    may drop `content`), else the text parts of `content`; and the ids of the turn the blob sealed
    with it, or the response id they are kept under."""
    blob = model.encrypted_content
    if blob:
        sealed = reasoning_blob.unseal(blob)
        if sealed is not None:
            return Reasoning(text=sealed.text), sealed.token_ids if sealed.token_ids is not None else sealed.turn
        log.warning("ignoring %s.encrypted_content: not a reasoning blob of this gateway (tampered, or "
                    "sealed with another --reasoning-secret)", param)
    return Reasoning(text="".join(part.text for part in model.content or () if isinstance(part, TextPart))), None


def _local_shell_call_id(model: LocalShellCallItem | LocalShellOutputItem, param: str) -> str:
    """Older payloads identify a local shell call by `id` alone."""
    call_id = model.call_id if model.call_id is not None else model.id
    if call_id is None:
        raise invalid_request(f"Missing required parameter: '{param}.call_id'.", param=f"{param}.call_id",
                              code="missing_required_parameter")
    return call_id


def content_text(content: Content, param: str) -> str:
    """The text of content where no image is taken (instructions, an assistant's message)."""
    return "".join(part for part in _content(content, param, images=False) if isinstance(part, str))


def _content(content: Content, param: str, *, images: bool) -> list[str | Image]:
    """A content string or part list, in order; `input_image` parts where `images` (user messages, tool
    outputs), else a 400."""
    if isinstance(content, str):
        return [content]
    return [content_part(part, f"{param}[{j}]", images=images) for j, part in enumerate(content)]


def content_part(part: Part, param: str, *, images: bool) -> str | Image:
    """One content part: its text, or its image where `images`; a 400 for media not taken here."""
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, RefusalPart):
        return part.refusal or ""
    if isinstance(part, ImagePart) and images:
        return responses_image(part, param)
    kind = part.type
    if kind in ("input_image", "input_file", "input_audio"):
        where = "here" if kind == "input_image" else "by this gateway"
        raise invalid_request(f"'{param}' is {kind}, which is not accepted {where}.", param=param,
                              code="unsupported_content")
    raise invalid_request(f"Unsupported content part type {kind!r} at '{param}'.", param=f"{param}.type",
                          code="unsupported_content")


def _output(output: str | list[Part] | TextPart, param: str) -> list[str | Image]:
    """Tool outputs are strings, or content-part lists (text and, from Codex's view_image, images)."""
    if isinstance(output, TextPart):
        return [output.text]
    return _content(output, param, images=True)


def _output_text(output: str | list[Part] | TextPart, param: str) -> str:
    return "".join(part for part in _output(output, param) if isinstance(part, str))


def _take_leading_instructions(items: list[Item]) -> str | None:
    """Codex sends no `instructions`: its base prompt is the first developer message."""
    if items and isinstance(items[0], Message) and items[0].role in ("system", "developer"):
        return items.pop(0).text
    return None
