"""The MCP client (gateway/upstream/mcp.py) against a real MCP server made with the `mcp` SDK:
both transports, and every failure as an error value in OpenAI's shapes, never an exception."""

from __future__ import annotations

import pytest

from gateway.ops.vllm_process import free_port
from gateway.upstream.mcp import McpServer, call_tool, list_tools
from tests.support.mcp_server import HUGE_BYTES, fingerprint, mcp_servers


@pytest.fixture(scope="module")
def servers():
    with mcp_servers() as servers:
        yield servers


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_lists_and_calls_over_both_transports(servers, transport):
    server = McpServer("tools", getattr(servers, transport))
    listed = await list_tools(server)
    assert [tool.name for tool in listed] == ["add", "fail", "huge", "hang", "echo_auth"]
    add = listed[0]
    assert add.description == "Add two integers." and add.input_schema["required"] == ["a", "b"]
    assert add.annotations == {"readOnlyHint": True}
    result = await call_tool(server, "add", '{"a": 20, "b": 22}')
    assert (result.output, result.error) == ("42", None) and result.seconds > 0


async def test_the_request_headers_reach_the_server_and_are_not_in_its_repr(servers):
    server = McpServer("tools", servers.http, {"Authorization": "Bearer sk-secret"})
    assert (await call_tool(server, "echo_auth", "{}")).output == fingerprint("Bearer sk-secret")
    assert "sk-secret" not in repr(server)


async def test_a_tool_error_is_a_tool_execution_error(servers):
    result = await call_tool(McpServer("tools", servers.http), "fail", '{"reason": "because"}')
    assert result.output is None and result.error.shown["type"] == "mcp_tool_execution_error"
    assert result.error.shown["content"][0]["type"] == "text"


async def test_output_past_the_bound_fails_the_call(servers):
    result = await call_tool(McpServer("tools", servers.http), "huge", "{}", max_output_bytes=1 << 20)
    assert result.output is None and result.error.shown["type"] == "mcp_protocol_error"
    assert result.error.message == (f"The tool's output ({HUGE_BYTES} bytes) is over the gateway's bound of "
                                    f"{1 << 20} bytes.")


async def test_a_server_past_the_timeout_fails_the_call_and_the_call_is_dropped(servers):
    result = await call_tool(McpServer("tools", servers.http), "hang", "{}", timeout=1.0)
    assert result.error.shown == {"type": "mcp_protocol_error", "code": -32001,
                                  "message": "The MCP server 'tools' did not answer within 1 s."}
    assert servers.hanging.is_set()
    assert servers.hang_ended.wait(30), "the server's call was never cancelled"


async def test_a_server_that_is_down_is_an_error_not_an_exception():
    server = McpServer("gone", f"http://127.0.0.1:{free_port()}/mcp")
    listed = await list_tools(server, timeout=5)
    assert listed.shown["type"] == "mcp_protocol_error" and "could not be reached" in listed.message
    called = await call_tool(server, "add", "{}", timeout=5)
    assert called.output is None and "could not be reached" in called.error.message


async def test_arguments_that_are_not_a_json_object_fail_before_connecting():
    server = McpServer("gone", f"http://127.0.0.1:{free_port()}/mcp")
    assert (await call_tool(server, "add", "[1, 2]")).error.shown["code"] == -32602
    assert "not JSON" in (await call_tool(server, "add", "{oops")).error.message
