"""Remote MCP tools in a Responses request: `{"type": "mcp", "server_label", "server_url", …}`.

The gateway lists the server's tools, offers them to the model as functions named
`{server_label}__{tool}`, and runs the model's calls itself between generations of one
response (gateway/pipeline/_tool_loop.py), as OpenAI's Responses API does. This module holds
the request side:

- the servers a request names, admitted only under `--mcp-allowed-url` (scheme, host and
  port equal, path under the prefix's): anything else is a 400 before any connection, so
  the gateway relays to no address a client picks;
- the listing: reused when the context holds one for the label (an `mcp_list_tools` input
  item, a conversation's item, the tools of the response a `previous_response_id` names),
  else fetched, and shown as an `mcp_list_tools` output item;
- `require_approval` (OpenAI's default: "always"): such a call ends the response as an
  `mcp_approval_request`; an `mcp_approval_response` input approves (the call runs before
  the next generation) or declines it.

Headers (credentials) reach the MCP client only: the response echoes the tool without them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from gateway.adapters._tool_schema import ApprovalFilter, McpServerTool, McpToolFilter, ResponsesTool
from gateway.adapters.request_schema import InputItem, McpApprovalResponseItem, McpCallItem, McpListToolsItem
from gateway.core.conversation import Conversation, Item, Tool, ToolCall, ToolOutput
from gateway.core.errors import invalid_request
from gateway.core.ids import new_id
from gateway.core.settings import Settings
from gateway.upstream import mcp
from gateway.upstream.mcp import McpError, McpResult, McpServer, McpTool

__all__ = [
    "CALL_PREFIX",
    "MCP_ITEMS",
    "Approval",
    "HostedTool",
    "McpPlan",
    "approval_item",
    "approvals_in",
    "call_item",
    "echoed",
    "input_items",
    "listed_as_tools",
    "listed_in",
    "plan",
]

SEPARATOR = "__"
CALL_PREFIX, APPROVAL_PREFIX = "mcp_", "mcpr_"  # item ids: the prefix + the canonical call's id
_LABEL = re.compile(r"[A-Za-z0-9_-]{1,64}")
DECLINED = "The user declined to run this tool call."
MCP_ITEMS = (McpCallItem, McpListToolsItem, McpApprovalResponseItem)  # the input items `input_items` reads
Approval = tuple[int, McpApprovalResponseItem]  # an answer to an approval request, and its place in `input`


@dataclass(frozen=True, slots=True)
class _Filter:
    names: frozenset[str] | None = None  # None: any name
    read_only: bool | None = None  # None: either

    def matches(self, tool: McpTool) -> bool:
        if self.names is not None and tool.name not in self.names:
            return False
        return self.read_only is None or bool((tool.annotations or {}).get("readOnlyHint")) == self.read_only


@dataclass(frozen=True, slots=True)
class HostedServer:
    server: McpServer
    allowed: _Filter | None  # `allowed_tools`; None: all
    always: _Filter | None  # `require_approval.always`: tools that need approval
    never: _Filter | None  # `require_approval.never`: tools that do not
    default: bool = True  # the rest: "always" (OpenAI's default) or "never"

    def needs_approval(self, tool: McpTool) -> bool:
        if self.never is not None and self.never.matches(tool):
            return False
        if self.always is not None and self.always.matches(tool):
            return True
        return self.default


@dataclass(frozen=True, slots=True)
class HostedTool:
    server: HostedServer
    tool: McpTool

    @property
    def label(self) -> str:
        return self.server.server.label

    @property
    def approval(self) -> bool:
        return self.server.needs_approval(self.tool)


@dataclass(slots=True)
class McpPlan:
    """The MCP side of one response: what the model may call, and what came before its first generation."""

    tools: dict[str, HostedTool]  # by the name the model calls
    max_calls: int
    timeout: float
    max_output_bytes: int
    first_items: list[dict[str, Any]] = field(default_factory=list)  # output items before any generation
    calls_before: list[tuple[HostedTool, McpResult]] = field(default_factory=list)  # approved calls run for it


def servers(tools: Sequence[ResponsesTool], settings: Settings) -> dict[str, HostedServer]:
    """The request's MCP servers by label; 400 for a label or URL the gateway does not take."""
    found: dict[str, HostedServer] = {}
    for i, tool in enumerate(tools):
        if not isinstance(tool, McpServerTool):
            continue
        param, label = f"tools[{i}]", tool.server_label
        if not _LABEL.fullmatch(label) or SEPARATOR in label:
            raise invalid_request(f"Invalid '{param}.server_label': 1-64 letters, digits, '_' or '-' (not '__').",
                                  param=f"{param}.server_label", code="invalid_value")
        if label in found:
            raise invalid_request(f"Duplicate MCP server_label {label!r}.", param=f"{param}.server_label",
                                  code="invalid_value")
        if tool.connector_id is not None or tool.tunnel_id is not None:
            raise invalid_request("MCP connectors and tunnels are OpenAI's own; give a 'server_url'.",
                                  param=param, code="unsupported_value")
        if tool.server_url is None:
            raise invalid_request(f"Missing required parameter: '{param}.server_url'.", param=f"{param}.server_url",
                                  code="missing_required_parameter")
        _check_allowed(tool.server_url, settings.mcp_allowed_urls, f"{param}.server_url")
        headers = tool.headers or {}
        if tool.authorization is not None:
            headers = {**headers, "Authorization": f"Bearer {tool.authorization}"}
        always, never, default = _approval(tool.require_approval)
        found[label] = HostedServer(McpServer(label, tool.server_url, headers, tool.server_description),
                                    _filter(tool.allowed_tools), always, never, default)
    return found


def echoed(raw: dict[str, Any]) -> dict[str, Any]:
    """An MCP tool as the Response object shows it: never its credentials."""
    return {key: value for key, value in raw.items() if key not in ("headers", "authorization")} | {"headers": None}


def model_name(label: str, tool: str) -> str:
    return f"{label}{SEPARATOR}{tool}"


def listed_in(items: Iterable[InputItem]) -> dict[str, list[McpTool]]:
    """The listings `mcp_list_tools` items hold, by server label (the last of each)."""
    return {item.server_label: [McpTool(t["name"], t.get("input_schema") or {}, t.get("description"),
                                        t.get("annotations")) for t in item.tools if "name" in t]
            for item in items if isinstance(item, McpListToolsItem) and not item.error}


def approvals_in(items: Sequence[InputItem]) -> list[Approval]:
    """The input's `mcp_approval_response` items, by their place in it."""
    return [(i, item) for i, item in enumerate(items) if isinstance(item, McpApprovalResponseItem)]


def listed_as_tools(tools: Iterable[Tool]) -> dict[str, list[McpTool]]:
    """The listings an earlier response offered, recovered from its tools (`label__name`)."""
    found: dict[str, list[McpTool]] = {}
    for tool in tools:
        label, sep, name = tool.name.partition(SEPARATOR)
        if sep and name:
            found.setdefault(label, []).append(McpTool(name, tool.parameters, tool.description or None))
    return found


def input_items(item: McpListToolsItem | McpCallItem | McpApprovalResponseItem) -> list[Item]:
    """What an MCP item of a resent history is to the model: a call (and its output). A listing
    or an approval response is not shown to the model as an item."""
    if not isinstance(item, McpCallItem):
        return []
    name = model_name(item.server_label, item.name)
    if item.type == "mcp_approval_request":
        return [ToolCall(call_id=item.id.removeprefix(APPROVAL_PREFIX), name=name, arguments=item.arguments)]
    call_id = item.id.removeprefix(CALL_PREFIX)
    output = item.output if item.output is not None else _error_text(item.error)
    return [ToolCall(call_id=call_id, name=name, arguments=item.arguments),
            ToolOutput(call_id=call_id, output=output or "", name=name)]


async def plan(raw_tools: Sequence[ResponsesTool], approvals: Sequence[Approval], conversation: Conversation,
               listed: dict[str, list[McpTool]], settings: Settings, max_tool_calls: int | None) -> McpPlan | None:
    """The MCP side of a response, before it starts: its servers admitted, their listings
    reused or fetched (the tools offered in `conversation`), and the calls the input approves
    (`approvals`) run (their outputs appended to `conversation`). None when the request names
    no MCP server."""
    hosted = servers(raw_tools, settings)
    if not hosted:
        _check_approvals(approvals, {}, conversation)
        return None
    result = McpPlan({}, max_tool_calls if max_tool_calls is not None else settings.mcp_max_calls,
                     settings.mcp_timeout, settings.mcp_max_output_bytes)
    for label, server in hosted.items():
        tools = listed.get(label)
        if tools is None:
            fetched = await mcp.list_tools(server.server, timeout=settings.mcp_timeout)
            if isinstance(fetched, McpError):
                result.first_items.append(list_item(label, [], fetched.message))
                continue
            tools = [tool for tool in fetched if server.allowed is None or server.allowed.matches(tool)]
            result.first_items.append(list_item(label, tools))
        for tool in tools:
            if server.allowed is None or server.allowed.matches(tool):
                result.tools[model_name(label, tool.name)] = HostedTool(server, tool)
    offered = [Tool(name=name, description=hosted_tool.tool.description or "", parameters=hosted_tool.tool.input_schema)
               for name, hosted_tool in result.tools.items()]
    if conversation.tool_choice != "none":
        conversation.tools = [*conversation.tools, *offered]
    for call, approve, reason in _check_approvals(approvals, result.tools, conversation):
        hosted_tool = result.tools[call.name]
        if approve:
            outcome = await mcp.call_tool(hosted_tool.server.server, hosted_tool.tool.name, call.arguments,
                                          timeout=settings.mcp_timeout, max_output_bytes=settings.mcp_max_output_bytes)
            result.calls_before.append((hosted_tool, outcome))
            result.first_items.append(call_item(call.call_id, hosted_tool, call.arguments, outcome,
                                                approval_request_id=APPROVAL_PREFIX + call.call_id))
            text = outcome.output if outcome.error is None else outcome.error.message
        else:
            text = DECLINED + (f" Reason: {reason}" if reason else "")
        conversation.items.append(ToolOutput(call_id=call.call_id, output=text or "", name=call.name))
    return result


def list_item(label: str, tools: list[McpTool], error: str | None = None) -> dict[str, Any]:
    return {"type": "mcp_list_tools", "id": new_id("mcpl"), "server_label": label, "error": error,
            "tools": [{"name": t.name, "description": t.description, "input_schema": t.input_schema,
                       "annotations": t.annotations} for t in tools]}


def call_item(call_id: str, hosted: HostedTool, arguments: str, outcome: McpResult | None, *,
              approval_request_id: str | None = None) -> dict[str, Any]:
    """An `mcp_call` item: running (`outcome` None), completed or failed."""
    item = {"type": "mcp_call", "id": CALL_PREFIX + call_id, "server_label": hosted.label, "name": hosted.tool.name,
            "arguments": arguments, "approval_request_id": approval_request_id, "output": None, "error": None,
            "status": "in_progress"}
    if outcome is not None:
        item.update(output=outcome.output, error=outcome.error.shown if outcome.error else None,
                    status="completed" if outcome.error is None else "failed")
    return item


def approval_item(call_id: str, hosted: HostedTool, arguments: str) -> dict[str, Any]:
    return {"type": "mcp_approval_request", "id": APPROVAL_PREFIX + call_id, "server_label": hosted.label,
            "name": hosted.tool.name, "arguments": arguments}


def _check_approvals(approvals: Sequence[Approval], tools: dict[str, HostedTool], conversation: Conversation
                     ) -> list[tuple[ToolCall, bool, str | None]]:
    """The calls `mcp_approval_response` items answer; 400 for one no pending request of this response's
    MCP tools matches."""
    answered = []
    pending = _pending_calls(conversation.items)
    for i, approval in approvals:
        request_id = approval.approval_request_id
        call = pending.pop(request_id.removeprefix(APPROVAL_PREFIX), None)
        if call is None or call.name not in tools:
            raise invalid_request(f"No pending MCP approval request with id {request_id!r} (of this request's MCP "
                                  f"tools) to answer at 'input[{i}]'.", param=f"input[{i}].approval_request_id",
                                  code="mcp_approval_request_not_found")
        answered.append((call, approval.approve, approval.reason))
    return answered


def _pending_calls(items: Sequence[Item]) -> dict[str, ToolCall]:
    calls = {item.call_id: item for item in items if isinstance(item, ToolCall)}
    for item in items:
        if isinstance(item, ToolOutput):
            calls.pop(item.call_id, None)
    return calls


def _check_allowed(url: str, allowed: Sequence[str], param: str) -> None:
    target = urlsplit(url)
    if target.scheme not in ("http", "https") or not target.hostname or target.username or target.password:
        raise invalid_request(f"Invalid '{param}': an http(s) URL without credentials is expected.", param=param,
                              code="invalid_value")
    if not any(_under(target, urlsplit(prefix)) for prefix in allowed):
        raise invalid_request(f"MCP server URL {url!r} is not allowed: this gateway reaches only the MCP servers "
                              f"its operator listed (--mcp-allowed-url).", param=param, code="mcp_server_not_allowed")


def _under(target: Any, prefix: Any) -> bool:
    if (target.scheme, target.hostname, target.port) != (prefix.scheme, prefix.hostname, prefix.port):
        return False
    base = prefix.path.rstrip("/")
    return target.path == base or target.path.startswith(base + "/") or (prefix.path.endswith("/") and (
        target.path.startswith(prefix.path)))


def _approval(raw: Literal["always", "never"] | ApprovalFilter | None) -> tuple[_Filter | None, _Filter | None, bool]:
    """(always, never, the rest) of `require_approval`."""
    if raw is None or raw == "always":
        return None, None, True
    if raw == "never":
        return None, None, False
    return _filter(raw.always), _filter(raw.never), True


def _filter(raw: list[str] | McpToolFilter | None) -> _Filter | None:
    if raw is None:
        return None
    if isinstance(raw, list):
        return _Filter(frozenset(raw))
    return _Filter(frozenset(raw.tool_names) if raw.tool_names is not None else None, raw.read_only)


def _error_text(error: Any) -> str | None:
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        if isinstance(error.get("message"), str):
            return error["message"]
        content = error.get("content")
        if isinstance(content, list):
            return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    return None
