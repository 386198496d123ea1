"""`tools` and `tool_choice` as typed models, one union per API, in the shapes OpenAI's API
reference gives them (Responses' flat `{"type": "function", "name": …}`, Chat Completions'
nested `{"type": "function", "function": {…}}`) and Codex's `namespace` tool.

What the gateway offers the model reads these (gateway/adapters/_codex_tools.py, responses/_mcp_tools.py,
chat/input.py): functions, freeform `custom` tools (their `format`: text, or a Lark or regex
grammar), Codex's namespaces and remote MCP servers. OpenAI's hosted tools (web search, file
search, computer use, code interpreter, image generation, shells …) are checked as the API
defines them and not offered, as is a type newer than this gateway (`BuiltinTool`).
Anthropic's tools are in gateway/adapters/anthropic/input.py.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from gateway.adapters._schema_base import Model, by_type

__all__ = [
    "AllowedToolsChoice",
    "ApprovalFilter",
    "BuiltinTool",
    "ChatAllowedToolsChoice",
    "ChatCustomTool",
    "ChatFunctionTool",
    "ChatNamedChoice",
    "ChatTool",
    "ChatToolChoice",
    "CustomTool",
    "FunctionSpec",
    "FunctionTool",
    "GrammarFormat",
    "HostedChoice",
    "McpServerTool",
    "McpToolFilter",
    "NamedChoice",
    "NamespaceTool",
    "ResponsesTool",
    "ToolChoice",
]

Mode = Literal["auto", "none", "required"]
Json = dict[str, Any]  # free-form; the body's `tools` is bounded in depth whole (schema_base.Bounded)


class TextFormat(Model):
    """A custom tool's input as free text (the default)."""

    type: Literal["text"]


class _Grammar(Model):
    """A grammar a custom tool's input matches, as both APIs write it."""

    syntax: Literal["lark", "regex"]
    definition: str


class GrammarFormat(_Grammar):
    """A custom tool's input constrained by a grammar (Responses: flat)."""

    type: Literal["grammar"]


class ChatGrammarFormat(Model):
    """Chat Completions' grammar format: nested under `grammar`."""

    type: Literal["grammar"]
    grammar: _Grammar


class FunctionSpec(Model):
    """A function tool's fields, as both APIs write them (Chat nests them under `function`)."""

    name: str
    description: str | None = None
    parameters: Json | None = None  # JSON Schema; none: a function of no arguments
    strict: bool | None = None


class _CustomSpec(Model):
    """A freeform tool's fields but its `format`, whose grammar each API shapes its own way."""

    name: str
    description: str | None = None


# -- Responses ----------------------------------------------------------------------------

class FunctionTool(FunctionSpec):
    type: Literal["function"]


class CustomTool(_CustomSpec):
    """A freeform tool: its input is one string (Codex's `apply_patch`)."""

    type: Literal["custom"]
    format: Annotated[TextFormat | GrammarFormat, Field(discriminator="type")] | None = None


class McpToolFilter(Model):
    tool_names: list[str] | None = None
    read_only: bool | None = None


class ApprovalFilter(Model):
    always: list[str] | McpToolFilter | None = None
    never: list[str] | McpToolFilter | None = None


class McpServerTool(Model):
    """A remote MCP server (gateway/adapters/responses/_mcp_tools.py admits and lists it)."""

    type: Literal["mcp"]
    server_label: str
    server_url: str | None = None  # required here: connectors are OpenAI's own (a 400 says so)
    connector_id: str | None = None
    tunnel_id: str | None = None
    authorization: str | None = None
    headers: dict[str, str] | None = None
    allowed_tools: list[str] | McpToolFilter | None = None
    require_approval: Literal["always", "never"] | ApprovalFilter | None = None
    server_description: str | None = None


class WebSearchTool(Model):
    type: Literal["web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11"]
    search_context_size: Literal["low", "medium", "high"] | None = None
    filters: Json | None = None
    user_location: Json | None = None


class FileSearchTool(Model):
    type: Literal["file_search"]
    vector_store_ids: list[str]
    max_num_results: int | None = None
    filters: Json | None = None
    ranking_options: Json | None = None


class ComputerTool(Model):
    type: Literal["computer_use_preview"]
    display_width: int
    display_height: int
    environment: str


class CodeInterpreterTool(Model):
    type: Literal["code_interpreter"]
    container: str | Json


class BuiltinTool(Model):
    """A hosted tool without required fields (`image_generation`, `local_shell`, `shell`,
    `apply_patch`, Codex's `tool_search`) or a type newer than this gateway: not offered."""

    type: str


_HOSTED = {"web_search": "web_search", "web_search_preview": "web_search", "web_search_2025_08_26": "web_search",
           "web_search_preview_2025_03_11": "web_search", "file_search": "file_search",
           "computer_use_preview": "computer", "code_interpreter": "code_interpreter"}
_KINDS = {"function", "custom", "namespace", "mcp", *_HOSTED}
_tool_kind = by_type(_KINDS, "builtin")


def _responses_tag(value: object) -> str | None:
    tag = _tool_kind(value)
    return _HOSTED.get(tag, tag) if tag is not None else None


class NamespaceTool(Model):
    """Codex's group of tools: each inner function is offered as `{name}__{function}`."""

    type: Literal["namespace"]
    name: str
    description: str | None = None
    tools: list[ResponsesTool] = Field(default_factory=list)


ResponsesTool = Annotated[
    Annotated[FunctionTool, Tag("function")] | Annotated[CustomTool, Tag("custom")]
    | Annotated[NamespaceTool, Tag("namespace")] | Annotated[McpServerTool, Tag("mcp")]
    | Annotated[WebSearchTool, Tag("web_search")] | Annotated[FileSearchTool, Tag("file_search")]
    | Annotated[ComputerTool, Tag("computer")] | Annotated[CodeInterpreterTool, Tag("code_interpreter")]
    | Annotated[BuiltinTool, Tag("builtin")],
    Discriminator(_responses_tag, custom_error_type="object_type", custom_error_message="not a tool")]
NamespaceTool.model_rebuild()


class NamedChoice(Model):
    """`{"type": "function" | "custom", "name": …}`: that tool must be called."""

    type: Literal["function", "custom"]
    name: str


class _ToolRef(Model):
    type: str
    name: str | None = None  # a function's or custom tool's; hosted tools have none


class AllowedToolsChoice(Model):
    """`{"type": "allowed_tools", "mode", "tools": [...]}`: only these may be called."""

    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[_ToolRef]


class HostedChoice(Model):
    """A hosted tool (`{"type": "web_search_preview"}`, `{"type": "mcp", "server_label", …}`):
    not offered here, so refused by name."""

    type: str


def _choice_tag(value: object) -> str | None:
    if isinstance(value, str):
        return "mode"
    tag = by_type({"function", "custom", "allowed_tools"}, "hosted")(value)
    return "named" if tag in ("function", "custom") else tag


# Both APIs' `tool_choice`: a mode, a named tool, allowed tools, or a hosted tool (each API's shapes)
_CHOICE = Discriminator(_choice_tag, custom_error_type="string_or_object", custom_error_message="not a tool choice")
ToolChoice = Annotated[
    Annotated[Mode, Tag("mode")] | Annotated[NamedChoice, Tag("named")]
    | Annotated[AllowedToolsChoice, Tag("allowed_tools")] | Annotated[HostedChoice, Tag("hosted")], _CHOICE]


# -- Chat Completions ---------------------------------------------------------------------

class ChatFunctionTool(Model):
    type: Literal["function"]
    function: FunctionSpec


class _ChatCustomSpec(_CustomSpec):
    format: Annotated[TextFormat | ChatGrammarFormat, Field(discriminator="type")] | None = None


class ChatCustomTool(Model):
    """Chat's freeform tool: checked, not offered (Codex's freeform tools come over Responses)."""

    type: Literal["custom"]
    custom: _ChatCustomSpec


ChatTool = Annotated[
    Annotated[ChatFunctionTool, Tag("function")] | Annotated[ChatCustomTool, Tag("custom")]
    | Annotated[BuiltinTool, Tag("other")],
    Discriminator(by_type({"function", "custom"}), custom_error_type="object_type", custom_error_message="not a tool")]


class _Named(Model):
    name: str


class ChatNamedChoice(Model):
    """`{"type": "function", "function": {"name": …}}` or `{"type": "custom", "custom": {"name": …}}`."""

    type: Literal["function", "custom"]
    function: _Named | None = None
    custom: _Named | None = None


class _ChatToolRef(Model):
    type: str
    function: _Named | None = None
    custom: _Named | None = None


class _AllowedTools(Model):
    mode: Literal["auto", "required"]
    tools: list[_ChatToolRef]


class ChatAllowedToolsChoice(Model):
    type: Literal["allowed_tools"]
    allowed_tools: _AllowedTools


ChatToolChoice = Annotated[
    Annotated[Mode, Tag("mode")] | Annotated[ChatNamedChoice, Tag("named")]
    | Annotated[ChatAllowedToolsChoice, Tag("allowed_tools")] | Annotated[HostedChoice, Tag("hosted")], _CHOICE]
