"""Remote MCP servers, as the Responses API's `{"type": "mcp"}` tools reach them.

The official `mcp` SDK is the client: Streamable HTTP, or the older HTTP+SSE transport for
a `server_url` whose path ends in `/sse`. Each operation (a listing, a call) opens its own
session and closes it, all inside one deadline: a response holds no connection between
its generations, and a slow or dead server costs at most the timeout. The SDK follows
redirects only within the server's origin, so the URL the allowlist admitted
(gateway/adapters/responses/_mcp_tools.py) is the only one reached.

Failures never raise: a listing or a call answers an `McpError` in OpenAI's shapes
(`mcp_protocol_error`, `http_error`, `mcp_tool_execution_error`), which the response
shows and the model reads. The headers a request sent (credentials) live only in the
`McpServer` of that request: never stored, never logged, not in its repr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx2
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

__all__ = ["McpError", "McpResult", "McpServer", "McpTool", "call_tool", "list_tools"]

log = logging.getLogger(__name__)
T = TypeVar("T")

TIMEOUT = 30.0  # seconds a listing or a call may take, connecting included
MAX_OUTPUT_BYTES = 1 << 20  # a call's output, as UTF-8, that the model may be shown


@dataclass(frozen=True, slots=True)
class McpServer:
    label: str  # `server_label`
    url: str  # `server_url`, admitted by --mcp-allowed-url
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # credentials: this request's only
    description: str | None = None


@dataclass(frozen=True, slots=True)
class McpTool:
    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    annotations: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class McpError:
    """What went wrong, as an `mcp_call`'s `error` (or an `mcp_list_tools`' message) shows it."""

    shown: dict[str, Any]  # OpenAI's MCPToolCallError: protocol, HTTP or tool execution error

    @property
    def message(self) -> str:
        if self.shown["type"] == "mcp_tool_execution_error":
            return _text(self.shown["content"])
        return self.shown["message"]


@dataclass(frozen=True, slots=True)
class McpResult:
    output: str | None  # the tool's text; None when it failed
    error: McpError | None
    seconds: float  # how long the call took, connecting included


async def list_tools(server: McpServer, *, timeout: float = TIMEOUT) -> list[McpTool] | McpError:
    async def listing(client: Client) -> list[McpTool]:
        tools: list[McpTool] = []
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools += [McpTool(tool.name, dict(tool.input_schema or {}), tool.description, _annotations(tool))
                      for tool in page.tools]
            cursor = page.next_cursor
            if not cursor:
                return tools

    return await _session(server, timeout, listing)


async def call_tool(server: McpServer, name: str, arguments: str, *, timeout: float = TIMEOUT,
                    max_output_bytes: int = MAX_OUTPUT_BYTES) -> McpResult:
    """Run `name` with `arguments` (the model's JSON text); its output bounded by `max_output_bytes`."""
    started = time.perf_counter()
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return McpResult(None, _protocol_error(-32602, f"The arguments are not JSON: {exc}"), 0.0)
    if not isinstance(parsed, dict):
        return McpResult(None, _protocol_error(-32602, "The arguments must be a JSON object."), 0.0)

    async def call(client: Client) -> tuple[str, bool]:
        result = await client.call_tool(name, parsed)
        return _output(result), bool(result.is_error)

    answer = await _session(server, timeout, call, max_event_bytes=max_output_bytes)
    seconds = time.perf_counter() - started
    if isinstance(answer, McpError):
        return McpResult(None, answer, seconds)
    output, is_error = answer
    size = len(output.encode("utf-8", "surrogatepass"))
    if size > max_output_bytes:
        return McpResult(None, _protocol_error(-32000, f"The tool's output ({size} bytes) is over the gateway's "
                                                       f"bound of {max_output_bytes} bytes."), seconds)
    if is_error:
        return McpResult(None, McpError({"type": "mcp_tool_execution_error",
                                         "content": [{"type": "text", "text": output}]}), seconds)
    return McpResult(output, None, seconds)


async def _session(server: McpServer, timeout: float, work: Callable[[Client], Awaitable[T]], *,
                   max_event_bytes: int = MAX_OUTPUT_BYTES) -> T | McpError:
    """`work` on a fresh session with `server`, all within `timeout` seconds; failures as an McpError."""
    try:
        async with asyncio.timeout(timeout), httpx2.AsyncClient(
                headers=server.headers, timeout=httpx2.Timeout(timeout, read=timeout)) as http, Client(
                _transport(server, http, max_event_bytes), read_timeout_seconds=timeout) as client:
            return await work(client)
    except TimeoutError:
        return _protocol_error(-32001, f"The MCP server '{server.label}' did not answer within {timeout:g} s.")
    except Exception as exc:  # noqa: BLE001 (the SDK's task groups wrap what failed in exception groups)
        return _failure(server, _innermost(exc))


def _failure(server: McpServer, exc: BaseException) -> McpError:
    if isinstance(exc, MCPError):
        return _protocol_error(exc.code, exc.error.message)
    if isinstance(exc, httpx2.HTTPStatusError):
        return McpError({"type": "http_error", "code": exc.response.status_code,
                         "message": f"The MCP server '{server.label}' answered HTTP {exc.response.status_code}."})
    if isinstance(exc, httpx2.HTTPError | OSError):
        return _protocol_error(-32000, f"The MCP server '{server.label}' could not be reached ({type(exc).__name__}).")
    log.info("MCP server %s failed: %r", server.label, exc)  # the SDK's own errors: a cut stream, a bad message
    return _protocol_error(-32000, f"The MCP server '{server.label}' failed ({type(exc).__name__}).")


def _transport(server: McpServer, http: httpx2.AsyncClient, max_event_bytes: int) -> Any:
    if urlsplit(server.url).path.rstrip("/").endswith("/sse"):
        headers = server.headers

        def factory(**options: Any) -> httpx2.AsyncClient:
            return httpx2.AsyncClient(**{**options, "headers": headers})

        return sse_client(server.url, headers=headers, httpx_client_factory=factory)
    # An event a little over the output bound is refused by the transport, not buffered whole.
    return streamable_http_client(server.url, http_client=http, max_sse_event_size=max_event_bytes + 65536)


def _annotations(tool: Any) -> dict[str, Any] | None:
    return tool.annotations.model_dump(exclude_none=True, by_alias=True) if tool.annotations else None


def _output(result: Any) -> str:
    """A call's content as text: text blocks as they are, others (images, resources) as JSON."""
    texts = []
    for block in result.content:
        if getattr(block, "type", None) == "text":
            texts.append(block.text)
        else:
            texts.append(block.model_dump_json(exclude_none=True, by_alias=True))
    if not texts and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(texts)


def _text(content: Any) -> str:
    return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))


def _protocol_error(code: int, message: str) -> McpError:
    return McpError({"type": "mcp_protocol_error", "code": code, "message": message})


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
