"""ByteDance Seed-OSS: Qwen3's XML tool calls and reasoning under Seed's own tokens.

Seed-OSS writes

    <seed:think>…</seed:think>
    <seed:tool_call>
    <function=NAME>
    <parameter=KEY>VALUE</parameter>
    </function>
    </seed:tool_call>

and ends every message with `<seed:eos>` (`<seed:bos>ROLE\\n` opens one). The call grammar is
Qwen3's byte for byte, as vLLM's `seed_oss` parser says (`vllm/parser/seed_oss.py` subclasses its
Qwen3 parser and renames only the four wrapper tokens and the turn tokens), so the parser is
`xml_calls`' with Seed's markers; values are typed by the tool's schema the same way.

The model opens `<seed:think>` itself (the generation prompt is `<seed:bos>assistant\\n`). The
template iterates `tool_call.arguments|items`, so calls reach it as dicts (`shared.qwen_messages`).
"""

from __future__ import annotations

from gateway.formats._family import Family, Turns
from gateway.formats._shared import qwen_messages
from gateway.formats._xml_calls import parsers

__all__ = ["FAMILY"]

THINK_OPEN, THINK_CLOSE = "<seed:think>", "</seed:think>"
CALL_OPEN, CALL_CLOSE = "<seed:tool_call>", "</seed:tool_call>"
EOS = "<seed:eos>"

FAMILY = Family(
    name="seed_oss", tool_parsers=("seed_oss",), reasoning_parsers=("seed_oss",),
    detect=lambda template: CALL_OPEN in template,
    markers={"think_open": THINK_OPEN, "think_close": THINK_CLOSE, "call_open": CALL_OPEN, "call_close": CALL_CLOSE},
    needs=(THINK_OPEN, THINK_CLOSE, CALL_OPEN, CALL_CLOSE, EOS), turns=Turns(stops=(EOS,), terminators=(EOS,)),
    prepare=qwen_messages, parsers=parsers)
