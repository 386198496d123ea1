"""MiniMax-M2 (and M2.1/M2.5, same markup) tool calls: the family's tags for the invoke-block parser.

MiniMax-M2 reasons first (its generation prompt opens `<think>`), then writes its calls as

    <minimax:tool_call>
    <invoke name="NAME">
    <parameter name="KEY">VALUE</parameter>
    </invoke>
    </minimax:tool_call>

and ends its turn with `[e~[`, which also closes every other message. `<minimax:tool_call>` and
`</minimax:tool_call>` are single added tokens, so a block opens and closes on those ids only; the
`<invoke>` and `<parameter>` tags inside are text (`gateway.formats._invoke` reads them). Values are the
text between the tags, kept verbatim as vLLM's `minimax_m2` parser keeps them
(`vllm/parser/minimax_m2.py`), then typed by the tool's schema as vLLM types them.

Rendering: the template iterates `tool_call.arguments|items` (arguments as a dict), renders only the
first system message and drops any other, and renders the reasoning of turns after the last user
message only: `shared.qwen_messages` gives it the shapes Qwen3.6's template takes (arguments
as dicts, one leading system message, a later developer message as a user message).
"""

from __future__ import annotations

import re

from gateway.formats._family import Family, ParserFactory
from gateway.formats._invoke import InvokeToolCallParser, Tags
from gateway.formats._shared import qwen_messages

__all__ = ["FAMILY"]

CALLS_BEGIN, CALLS_END = "<minimax:tool_call>", "</minimax:tool_call>"
TEMPLATE_MARKER = CALLS_BEGIN
_OPEN, _CLOSE = "\ufdd1", "\ufdd2"  # the two ids in scanned text


def tags(open_id: int, close_id: int) -> Tags:
    return Tags(marks={open_id: _OPEN, close_id: _CLOSE}, opener=open_id, block_open=None, block_close=_CLOSE,
                invoke_open='<invoke name="', invoke_close="</invoke>", parameter_open="<parameter",
                parameter_close="</parameter>", parameter=re.compile(r'<parameter\s+name="([^"]*)"\s*>'))


class MiniMaxToolCallParser(InvokeToolCallParser):
    def value(self, text: str, is_string: str | None) -> str:
        return text  # verbatim; the schema types it


def _parsers(vocab: dict[str, int]) -> ParserFactory:
    invoke_tags = tags(vocab[CALLS_BEGIN], vocab[CALLS_END])
    return lambda shared, starts, tools: MiniMaxToolCallParser(shared.token_bytes, shared.markup, invoke_tags,
                                                               shared.stop_ids, starts, tools)


FAMILY = Family(
    name="minimax", tool_parsers=("minimax_m2",), reasoning_parsers=("minimax_m2",),
    detect=lambda template: TEMPLATE_MARKER in template,
    markers={"call_open": CALLS_BEGIN, "call_close": CALLS_END}, needs=(CALLS_BEGIN, CALLS_END),
    prepare=qwen_messages, parsers=_parsers)
