"""StepFun Step-3.5 / Step-3.7: Qwen3's XML tool calls in ChatML turns, always thinking.

Step writes its calls as Qwen3.6 does (`<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n
</parameter>\\n</function>\\n</tool_call>`), so the parser is `xml_calls`'; vLLM's `step3p5` parser is its
Qwen3 parser with two changes (`vllm/parser/step3p5.py`): the generation prompt always opens
`<think>\\n` (the template has no switch to turn thinking off), and the reasoning's trailing
whitespace (`\\n</think>`) is not reasoning. Tool results go back in a `tool_response` turn, each
wrapped in `<tool_response>`, which is what tells Step's template from Qwen's.
"""

from __future__ import annotations

from gateway.formats._family import Family
from gateway.formats._shared import qwen_messages
from gateway.formats._xml_calls import parsers

__all__ = ["FAMILY"]

TEMPLATE_MARKER = "<|im_start|>tool_response"

FAMILY = Family(
    name="step3p5", tool_parsers=("step3p5",), reasoning_parsers=("step3p5",),
    detect=lambda template: TEMPLATE_MARKER in template,
    prepare=qwen_messages, parsers=parsers, image="<im_patch>", grammar="xml")
