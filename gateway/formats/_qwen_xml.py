"""Qwen3.5/3.6 and Qwen3-Coder XML tool calls, and NVIDIA Nemotron 3: the families' declarations.

These models write each call as a `<tool_call>` block of `<function=NAME>` with one
`<parameter=KEY>` a value; `xml_calls` reads them (the layout is in its docstring), each value
typed by the tool's schema as vLLM's `qwen3_coder` parser types it.

Rendering: the template iterates `tool_call.arguments|items`, so calls reach it with their
arguments as a dict (the canonical history keeps the JSON text). The published template also
raises "System message must be at the beginning." for a system message anywhere but first;
`shared.qwen_messages` makes one leading system message of the instructions and the developer
messages before the first other item (joined by a blank line), and renders a later developer
message as a user message in place, so that prompts stay append-only for the exact-token splice.
"""

from __future__ import annotations

from gateway.formats._family import Family
from gateway.formats._shared import qwen_messages
from gateway.formats._xml_calls import FUNCTION_OPEN, PARAMETER_OPEN, parsers

__all__ = ["FAMILY", "NEMOTRON_V3"]

FAMILY = Family(
    name="xml", tool_parsers=("qwen3_coder", "qwen3_xml"), reasoning_parsers=("qwen3",),
    detect=lambda template: FUNCTION_OPEN in template or PARAMETER_OPEN in template,
    prepare=qwen_messages, parsers=parsers, image="<|image_pad|>", grammar="xml")
# NVIDIA Nemotron 3 (Nano, Super): Qwen3-Coder's XML calls and `<think>` in ChatML turns; vLLM reads them with its
# `qwen3_coder` tool parser and the `nemotron_v3` reasoning parser (`vllm/parser/nemotron_v3.py`: Qwen3's, with the
# reasoning's trailing whitespace not reasoning). The template opens `<think>\n` (`<think></think>` with
# `enable_thinking` off) and gives itself away by its `truncate_history_thinking` switch.
NEMOTRON_V3 = Family(
    name="nemotron_v3", reasoning_parsers=("nemotron_v3",),
    detect=lambda template: "truncate_history_thinking" in template and FUNCTION_OPEN in template,
    prepare=qwen_messages, parsers=parsers, grammar="xml")
