"""IBM Granite 4.0: hermes JSON calls in Granite's own role turns, no reasoning.

Granite 4.0 writes its calls as Qwen2.5 does,

    <tool_call>
    {"name": NAME, "arguments": {…}}
    </tool_call>

(one block per call, after any text), so the parser is `hf.parser`'s hermes parser; vLLM's
`granite4` parser reads the same blocks out of the decoded text (`vllm/tool_parsers/granite4_tool_parser.py`,
with special tokens kept). Every message is `<|start_of_role|>ROLE<|end_of_role|>…<|end_of_text|>`:
`<|end_of_text|>` is the eos and ends the model's turn. Granite 4.0 has no reasoning markup (vLLM's
`granite` reasoning parser is Granite 3.2's prose "Here is my thought process:"), so `<think>`, if
the vocabulary holds it, is text. The template writes the arguments as given (a JSON string is
written verbatim) and tool results as `<tool_response>` blocks in one user turn; it drops reasoning.

Registered after the XML families: a Granite template writing `<function=` calls (Granite 4.2's
Nemotron-style ones) is not this family's.
"""

from __future__ import annotations

from gateway.formats._family import Family, Turns

__all__ = ["FAMILY"]

ROLE_OPEN, ROLE_CLOSE, END = "<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"

FAMILY = Family(
    name="granite4", tool_parsers=("granite4",),
    detect=lambda template: ROLE_OPEN in template and CALL_OPEN in template,
    markers={"think_open": None, "think_close": None}, needs=(ROLE_OPEN, ROLE_CLOSE, END, CALL_OPEN, CALL_CLOSE),
    turns=Turns(stops=(END,), terminators=(END,)), grammar="hermes")
