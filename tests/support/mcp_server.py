"""A real MCP server made with the `mcp` SDK (its `MCPServer`, formerly FastMCP), on loopback.

    with mcp_servers() as servers:
        servers.http   # http://127.0.0.1:P/mcp  (Streamable HTTP)
        servers.sse    # http://127.0.0.1:Q/sse  (the older HTTP+SSE transport)

Its tools: `add` (a + b), `fail` (raises: a tool execution error), `huge` (10 MB of text),
`hang` (never answers: past any timeout; `servers.hanging` is set once it was called and
`servers.hang_ended` once its call was cancelled), `echo_auth` (a fingerprint of the
Authorization header it was called with, to show the headers reach the server). Each call is recorded in `calls`.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from mcp.server.mcpserver import Context, MCPServer

from tests.support.threaded_server import serve_in_thread

HUGE_BYTES = 10 * 1024 * 1024


def fingerprint(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()[:16]


@dataclass
class McpServers:
    http: str = ""
    sse: str = ""
    calls: list[tuple[str, dict]] = field(default_factory=list)
    hanging: threading.Event = field(default_factory=threading.Event)
    hang_ended: threading.Event = field(default_factory=threading.Event)


def _server(record: McpServers) -> MCPServer:
    server = MCPServer("gateway-test-tools")

    @server.tool(annotations={"readOnlyHint": True})
    def add(a: int, b: int) -> int:
        """Add two integers."""
        record.calls.append(("add", {"a": a, "b": b}))
        return a + b

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails."""
        record.calls.append(("fail", {"reason": reason}))
        raise ValueError(f"failed on purpose: {reason}")

    @server.tool()
    def huge() -> str:
        """Ten megabytes of text."""
        record.calls.append(("huge", {}))
        return "x" * HUGE_BYTES

    @server.tool()
    async def hang() -> str:
        """Never answers."""
        record.calls.append(("hang", {}))
        record.hanging.set()
        try:
            await asyncio.Event().wait()
        finally:
            record.hang_ended.set()
        return "unreachable"

    @server.tool()
    def echo_auth(ctx: Context) -> str:
        """A fingerprint of the call's Authorization header (`fingerprint`), not the header itself."""
        request = ctx.request_context.request
        record.calls.append(("echo_auth", {}))
        return fingerprint(request.headers.get("authorization", "") if request is not None else "")

    return server


@contextmanager
def mcp_servers() -> Iterator[McpServers]:
    record = McpServers()
    server = _server(record)
    with ExitStack() as started:
        http_port = started.enter_context(serve_in_thread(server.streamable_http_app(), "MCP server (HTTP)"))
        sse_port = started.enter_context(serve_in_thread(server.sse_app(), "MCP server (SSE)"))
        record.http = f"http://127.0.0.1:{http_port}/mcp"
        record.sse = f"http://127.0.0.1:{sse_port}/sse"
        yield record
