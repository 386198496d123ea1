"""Kimi-K2 (Instruct and Thinking) tool calls: DeepSeek's section layout with Kimi's tokens and call ids.

Kimi writes its calls as

    <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}
    <|tool_call_end|>…<|tool_calls_section_end|>

(no newlines), reasons in `<think>…</think>` that it opens itself, and ends its turn with
`<|im_end|>`. The layout is DeepSeek-V3.1's (a section of calls, each a head and its arguments as
written), so the parser is `headed_calls`' with Kimi's markers; only the head differs: it is the call's
id, `functions.NAME:IDX`, which names the tool and which vLLM's `kimi_k2` parser returns as the
call's id. The template writes it back as the call's id and heads each result with
"## Return of ID", so the gateway keeps the model's id rather than making one: a call renders back
to the ids the model wrote. A head that is not `functions.NAME:IDX` with a valid name (one of the
request's tools, when it has tools) makes the call text.
"""

from __future__ import annotations

import re

from gateway.formats._family import Family, ParserFactory
from gateway.formats._headed_calls import HeadedCallsParser
from gateway.formats._shared import accepts_name

__all__ = ["FAMILY"]

CALLS_BEGIN, CALLS_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_BEGIN, CALL_END, SEP = "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>"
CALL_TOKENS = (CALL_BEGIN, CALL_END, SEP)  # in the order HeadedCallsParser takes their ids
TEMPLATE_MARKER = CALLS_BEGIN
_HEAD = re.compile(r"functions\.(?P<name>.+):[0-9]+")


class KimiToolCallParser(HeadedCallsParser):
    """The section parser reading Kimi's call heads (`functions.NAME:IDX`, the call's id)."""

    def call_head(self, head: str) -> tuple[str, str | None] | None:
        match = _HEAD.fullmatch(head)
        if match is None or not accepts_name(match["name"], self._names):
            return None
        return match["name"], head


def _parsers(vocab: dict[str, int]) -> ParserFactory:
    call_ids = tuple(vocab[t] for t in CALL_TOKENS)
    return lambda shared, starts, tools: KimiToolCallParser(shared.token_bytes, shared.markup, call_ids,
                                                            shared.stop_ids, starts, tools)


FAMILY = Family(
    name="kimi", tool_parsers=("kimi_k2",), reasoning_parsers=("kimi_k2",),
    detect=lambda template: TEMPLATE_MARKER in template,
    markers={"call_open": CALLS_BEGIN, "call_close": CALLS_END}, markup=CALL_TOKENS,
    needs=(CALLS_BEGIN, CALLS_END, *CALL_TOKENS), parsers=_parsers, image="<|media_pad|>")
