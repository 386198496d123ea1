"""DeepSeek-V3.1 (and V3.1-Terminus) tool calls: the streaming output parser and the family's tokens.

DeepSeek-V3.1 writes its calls as one section of calls, each a name and its JSON arguments:

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{"a": 1}<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>

then ends its turn with `<｜end▁of▁sentence｜>` (eos). It reasons in `<think>…</think>` when the
template's `thinking` switch opens `<think>` at the generation prompt, and otherwise starts after a
`</think>` the prompt wrote. Every marker is a single added token; `headed_calls` reads the
section, the layout DeepSeek shares with Kimi-K2.

vLLM's `deepseek_v31` parser (`tool_parsers/deepseekv31_tool_parser.py`) takes the name and the
arguments exactly as written, between the same markers, and so does the gateway. A head is the
tool's name, accepted as the GLM parser accepts one (one of the request's tools when it has tools,
otherwise any name without markup characters); a call with another name, or none, is text with
its markers.

Text items keep the model's text as written (no newline belongs to DeepSeek's markup), so a call
the model wrote renders back to its ids: the template inlines `content`, then the calls'
`arguments` strings verbatim.

Rendering needs nothing of this module: the template reads `hf_messages`' shapes as they are. Its
system prompt is every system message joined at the top, tool results follow the call turn with no
`<｜Assistant｜>`, and an assistant turn's reasoning is never rendered (the template writes `</think>`
in its place): the exact-token splice keeps the model's own reasoning ids where the client's
history has them.
"""

from __future__ import annotations

from gateway.formats._family import Family, ParserFactory
from gateway.formats._headed_calls import HeadedCallsParser
from gateway.formats._shared import accepts_name

__all__ = ["FAMILY", "DeepSeekToolCallParser"]

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
# The per-call markers: inside a section they structure it, anywhere else they are text.
CALL_TOKENS = (CALL_BEGIN, CALL_END, SEP)
TEMPLATE_MARKER = CALLS_BEGIN

class DeepSeekToolCallParser(HeadedCallsParser):
    """The section parser reading DeepSeek-V3.1's heads: the tool's name."""

    def call_head(self, head: str) -> tuple[str, str | None] | None:
        return (head, None) if accepts_name(head, self._names) else None


def _parsers(vocab: dict[str, int]) -> ParserFactory:
    call_ids = tuple(vocab[t] for t in CALL_TOKENS)
    return lambda shared, starts, tools: DeepSeekToolCallParser(shared.token_bytes, shared.markup, call_ids,
                                                                shared.stop_ids, starts, tools)


# The section's markers open and close calls; the per-call markers are markup in a section, else text.
FAMILY = Family(
    name="deepseek", tool_parsers=("deepseek_v31",), reasoning_parsers=("deepseek_v3", "deepseek_r1"),
    detect=lambda template: TEMPLATE_MARKER in template,
    markers={"call_open": CALLS_BEGIN, "call_close": CALLS_END}, markup=CALL_TOKENS,
    needs=(CALLS_BEGIN, CALLS_END, *CALL_TOKENS), parsers=_parsers)
