"""Responses API request body → canonical `Conversation` + sampling options.

Accepts what the OpenAI SDK and Codex send: `input` as a string or a list of items
(messages with content parts, reasoning, function calls and their outputs, Codex's custom
and local shell calls), leading system/developer text as the instructions, function tools
and Codex's namespace and custom tools (gateway/adapters/codex_tools.py).
"""

from __future__ import annotations

import json
import logging
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.adapters import compaction, mcp_tools, output_fields, reasoning_blob
from gateway.adapters.codex_tools import LOCAL_SHELL, custom_arguments, flat_name, function_tool, offered_tools
from gateway.adapters.images import responses_image
from gateway.adapters.mcp_tools import McpPlan
from gateway.adapters.request_schema import ResponsesBody, validate
from gateway.adapters.sampling_fields import parse_sampling
from gateway.adapters.validation import expect
from gateway.core.conversation import Conversation, Item, Message, Reasoning, Tool, ToolCall, ToolOutput, with_parts
from gateway.core.errors import invalid_request
from gateway.core.image import Image
from gateway.core.sampling import SamplingOptions
from gateway.upstream.mcp import McpTool

log = logging.getLogger(__name__)

_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})


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
    compact: bool = False  # the input ended with a compaction_trigger (gateway/adapters/compaction.py)
    tools: list[dict[str, Any]] = field(default_factory=list)
    # Reasoning items whose blob holds the ids their turn generated (for gateway/tokenfix/restore.py).
    generated: list[tuple[Reasoning, array | str]] = field(default_factory=list)
    # Remote MCP tools (gateway/adapters/mcp_tools.py): listings the context holds, by server label…
    listed: dict[str, list[McpTool]] = field(default_factory=dict)
    mcp: McpPlan | None = None  # …and, once planned, what the response may call


def parse_request(body: Any, earlier_calls: Mapping[str, str] | None = None) -> ResponsesRequest:
    """`earlier_calls`: tool names by call_id of calls made before this input (a WebSocket
    continuation's history), which its tool outputs may answer."""
    request = validate(ResponsesBody, body)  # every field's type and range: what is read below is checked
    instructions = request.instructions
    generated: list[tuple[Reasoning, array | str]] = []
    raw_input, compact = compaction.take_trigger(body.get("input"))
    # A continuation may send the trigger alone.
    items = input_items(raw_input, earlier_calls or {}, generated) if raw_input or not compact else []
    if compact:
        items.append(compaction.summary_prompt())
    if instructions is None:
        instructions = _take_leading_instructions(items)
    raw_tools = request.tools or []
    tools = [tool for i, raw in enumerate(raw_tools) for tool in offered_tools(raw, f"tools[{i}]")]
    tool_choice, allowed = output_fields.tool_choice(body.get("tool_choice"))
    if tool_choice == "none":
        tools = []
    effort = request.reasoning.effort if request.reasoning is not None else None
    conversation = Conversation(items=items, instructions=instructions, tools=tools, tool_choice=tool_choice,
                                reasoning_effort=effort)

    max_output = body.get("max_output_tokens")
    return_token_ids = bool(request.return_token_ids)
    text_logprobs = "message.output_text.logprobs" in (request.include or ()) or request.top_logprobs is not None
    wants_logprobs = return_token_ids or text_logprobs
    sampling = parse_sampling(body, max_tokens=max_output, logprobs=wants_logprobs)
    text_options = request.text or {}
    sampling.constraint = output_fields.output_constraint(body, tool_choice, allowed,
                                                          answer_format=text_options.get("format"),
                                                          answer_param="text.format")
    store = body.get("store", True) is not False
    echo = {
        "instructions": instructions if body.get("instructions") is not None else None,
        "tools": [_echoed_tool(raw) for raw in raw_tools],
        "tool_choice": body.get("tool_choice", "auto"),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_output_tokens": max_output,
        "metadata": request.metadata or {},
        "reasoning": {"effort": effort, "summary": request.reasoning.summary if request.reasoning else None},
        "text": request.text or {"format": {"type": "text"}},
        "store": store,
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "truncation": body.get("truncation", "disabled"),
        # Sent by OpenAI and required by Open Responses; the values this gateway uses.
        "presence_penalty": sampling.presence_penalty or 0.0,
        "frequency_penalty": sampling.frequency_penalty or 0.0,
        "top_logprobs": body.get("top_logprobs") or 0,
        "max_tool_calls": body.get("max_tool_calls"),
        "safety_identifier": body.get("safety_identifier"),
        "service_tier": "default",  # one tier here, whatever the request asked for
    }
    if body.get("user") is not None:
        echo["user"] = body["user"]
    background = bool(request.background)
    if background and not store:
        raise invalid_request("'background': true needs 'store': true (its result is stored to be retrieved).",
                              param="background", code="unsupported_value")
    echo["background"] = background
    truncation = echo["truncation"] = echo["truncation"] or "disabled"
    if truncation not in ("auto", "disabled"):
        raise invalid_request(f"Invalid value for 'truncation': {truncation!r}; expected 'auto' or 'disabled'.",
                              param="truncation", code="invalid_value")
    return ResponsesRequest(
        conversation=conversation, sampling=sampling, model=request.model, stream=bool(request.stream), echo=echo,
        store=store, prompt_cache_key=request.prompt_cache_key,
        return_token_ids=return_token_ids, text_logprobs=text_logprobs, background=background, tools=raw_tools, generated=generated,
        truncate=truncation == "auto", listed=mcp_tools.listed_in(raw_input if isinstance(raw_input, list) else []),
        compact=compact,
    )


def _echoed_tool(raw: Any) -> Any:
    """A function tool as the Response object shows it: `strict` and `parameters` always there."""
    if isinstance(raw, dict) and raw.get("type") == "function":
        return {**raw, "strict": raw.get("strict"), "parameters": raw.get("parameters")}
    if isinstance(raw, dict) and raw.get("type") == "mcp":
        return mcp_tools.echoed(raw)
    return raw


def input_items(raw: Any, earlier_calls: Mapping[str, str], generated: list[tuple[Reasoning, array | str]]
                ) -> list[Item]:
    """`input` as conversation items; `earlier_calls` as in `parse_request`, and the reasoning
    items whose blob holds their turn's generated ids appended to `generated`."""
    if isinstance(raw, str):
        if not raw:
            raise invalid_request("'input' must not be empty.", param="input", code="empty_input")
        return [Message(role="user", text=raw)]
    items_raw = expect(raw, list, "input", optional=False)
    if not items_raw:
        raise invalid_request("'input' must not be empty.", param="input", code="empty_input")
    items: list[Item] = []
    call_names = dict(earlier_calls)
    for i, raw_item in enumerate(items_raw):
        item = _plain_item(raw_item) if type(raw_item) is dict else None
        if item is None and type(raw_item) is dict and (hosted := mcp_tools.input_items(raw_item, f"input[{i}]")
                                                         ) is not None:
            call_names.update((call.call_id, call.name) for call in hosted if isinstance(call, ToolCall))
            items += hosted
            continue
        if item is None:
            item = _item(expect(raw_item, dict, f"input[{i}]", optional=False), f"input[{i}]")
        if item is None:
            continue
        if isinstance(item, Reasoning) and (ids := _generated_ids(raw_item)) is not None:
            generated.append((item, ids))
        if isinstance(item, ToolCall):
            call_names[item.call_id] = item.name
        elif isinstance(item, ToolOutput):
            item.name = call_names.get(item.call_id)
            if item.name is None:
                raise invalid_request(f"No tool call found for function call output with call_id "
                                      f"{item.call_id!r} at 'input[{i}]'.", param=f"input[{i}].call_id")
        items.append(item)
    return items


def _plain_item(raw: dict[str, Any]) -> Item | None:
    """Well-formed function calls and outputs, which Codex resends for every earlier turn,
    without `_item`'s per-field checks (they exist for the error messages); None: use `_item`."""
    kind = raw.get("type")
    if kind == "function_call_output":
        call_id, output = raw.get("call_id"), raw.get("output")
        if type(call_id) is str and type(output) is str:
            return ToolOutput(call_id=call_id, output=output)
    elif kind == "function_call" and raw.get("namespace") is None:
        call_id, name, arguments = raw.get("call_id"), raw.get("name"), raw.get("arguments")
        if type(call_id) is str and type(name) is str and type(arguments) is str:
            return ToolCall(call_id=call_id, name=name, arguments=arguments)
    return None


def _item(raw: dict[str, Any], param: str) -> Item | None:
    kind = raw.get("type", "message")
    if kind == "message":
        role = raw.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise invalid_request(f"Invalid value for '{param}.role': {role!r}; expected one of 'user', "
                                  f"'assistant', 'system', 'developer'.", param=f"{param}.role")
        content = _content(raw.get("content"), f"{param}.content", images=role == "user")
        text, parts = with_parts(content)
        channel = "commentary" if role == "assistant" and raw.get("phase") == "commentary" else None
        return Message(role=role, text=text, channel=channel, parts=parts)
    if kind == "reasoning":
        return _reasoning(raw, param)
    if kind == "function_call":
        namespace = expect(raw.get("namespace"), str, f"{param}.namespace")
        return ToolCall(
            call_id=expect(raw.get("call_id"), str, f"{param}.call_id", optional=False),
            name=flat_name(namespace, expect(raw.get("name"), str, f"{param}.name", optional=False)),
            arguments=expect(raw.get("arguments"), str, f"{param}.arguments", optional=False),
        )
    if kind == "custom_tool_call":
        return ToolCall(
            call_id=expect(raw.get("call_id"), str, f"{param}.call_id", optional=False),
            name=expect(raw.get("name"), str, f"{param}.name", optional=False),
            arguments=custom_arguments(expect(raw.get("input"), str, f"{param}.input", optional=False)),
        )
    if kind == "local_shell_call":
        action = expect(raw.get("action"), dict, f"{param}.action", optional=False)
        return ToolCall(call_id=_local_shell_call_id(raw, param), name=LOCAL_SHELL,
                        arguments=json.dumps(action, ensure_ascii=False))
    if kind == "local_shell_call_output":
        return ToolOutput(call_id=_local_shell_call_id(raw, param),
                          output=_output_text(raw.get("output"), f"{param}.output"))
    if kind in ("function_call_output", "custom_tool_call_output"):
        text, parts = with_parts(_output(raw.get("output"), f"{param}.output"))
        return ToolOutput(call_id=expect(raw.get("call_id"), str, f"{param}.call_id", optional=False), output=text,
                          parts=parts)
    if kind == "compaction":
        return compaction.summary_message(raw, param)
    if kind == "item_reference":
        raise invalid_request(f"'{param}' is an item_reference; this gateway does not store items "
                              f"(send the item itself).", param=param, code="unsupported_item")
    raise invalid_request(f"Unsupported input item type {kind!r} at '{param}'.", param=f"{param}.type",
                          code="unsupported_item")


def _reasoning(raw: dict[str, Any], param: str) -> Reasoning:
    """The exact text from the gateway's own `encrypted_content` blob when there is one (clients
    may drop `content`), else the text parts of `content`."""
    blob = raw.get("encrypted_content")
    if isinstance(blob, str) and blob:
        sealed = reasoning_blob.unseal(blob)
        if sealed is not None:
            return Reasoning(text=sealed.text)
        log.warning("ignoring %s.encrypted_content: not a reasoning blob of this gateway (tampered, or "
                    "sealed with another --reasoning-secret)", param)
    parts = raw.get("content") or []
    return Reasoning(text="".join(p.get("text", "") for p in parts if isinstance(p, dict)))


def _generated_ids(raw: dict[str, Any]) -> array | str | None:
    """The ids of the turn a reasoning item's blob sealed with it, or the response id they are
    kept under (`_reasoning` checked the blob)."""
    blob = raw.get("encrypted_content")
    sealed = reasoning_blob.unseal(blob) if isinstance(blob, str) and blob else None
    if sealed is None:
        return None
    return sealed.token_ids if sealed.token_ids is not None else sealed.turn


def _local_shell_call_id(raw: dict[str, Any], param: str) -> str:
    """Older payloads identify a local shell call by `id` alone."""
    call_id = raw.get("call_id") if raw.get("call_id") is not None else raw.get("id")
    return expect(call_id, str, f"{param}.call_id", optional=False)


def _content_text(content: Any, param: str) -> str:
    return "".join(part for part in _content(content, param, images=False) if isinstance(part, str))


def _content(content: Any, param: str, *, images: bool) -> list[str | Image]:
    """A content string or part list, in order; `input_image` parts where `images` (user messages, tool
    outputs), else a 400."""
    if isinstance(content, str):
        return [content]
    parts = expect(content, list, param, optional=False)
    found: list[str | Image] = []
    for j, part in enumerate(parts):
        part = expect(part, dict, f"{param}[{j}]", optional=False)
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            found.append(expect(part.get("text"), str, f"{param}[{j}].text", optional=False))
        elif kind == "refusal":
            found.append(part.get("refusal") or "")
        elif kind == "input_image" and images:
            found.append(responses_image(part, f"{param}[{j}]"))
        elif kind in ("input_image", "input_file", "input_audio"):
            where = "here" if kind == "input_image" else "by this gateway"
            raise invalid_request(f"'{param}[{j}]' is {kind}, which is not accepted {where}.",
                                  param=f"{param}[{j}]", code="unsupported_content")
        else:
            raise invalid_request(f"Unsupported content part type {kind!r} at '{param}[{j}]'.",
                                  param=f"{param}[{j}].type", code="unsupported_content")
    return found


def _output(output: Any, param: str) -> list[str | Image]:
    """Tool outputs are strings, or content-part lists (text and, from Codex's view_image, images)."""
    if isinstance(output, dict) and "text" in output:
        return [expect(output["text"], str, f"{param}.text", optional=False)]
    return _content(output, param, images=True)


def _output_text(output: Any, param: str) -> str:
    return "".join(part for part in _output(output, param) if isinstance(part, str))


def _take_leading_instructions(items: list[Item]) -> str | None:
    """Codex sends no `instructions`: its base prompt is the first developer message."""
    if items and isinstance(items[0], Message) and items[0].role in ("system", "developer"):
        return items.pop(0).text
    return None


def _tool(raw: Any, param: str) -> Tool | None:
    """A Chat Completions tool: functions only (Codex's tool shapes come over Responses)."""
    raw = expect(raw, dict, param, optional=False)
    if raw.get("type") != "function":
        log.debug("dropping tool of type %r (%s)", raw.get("type"), param)
        return None
    return function_tool(raw, param)


