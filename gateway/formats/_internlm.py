"""InternLM2 / InternLM2.5: one JSON call between `<|action_start|><|plugin|>` and `<|action_end|>`.

InternLM writes a call as an action of its `<|plugin|>` tool, in ChatML turns:

    <|action_start|><|plugin|>
    {"name": NAME, "arguments": {…}}<|action_end|><|im_end|>

(the model's own prompts say `"parameters"`, which vLLM's `internlm` parser also reads). It is
hermes' JSON between other marker tokens, so the parser is `hf.parser`'s, with `<|action_start|>`
and `<|action_end|>` as the call's markers and a body read only when it is the `<|plugin|>` action
(a `<|interpreter|>` action, or any other body, stays the text the model wrote). The template is
vLLM's `tool_chat_template_internlm2_tool.jinja` (the model's own renders no tools): tools go in a
`system name=<|plugin|>` message, results in `environment name=<|plugin|>` turns; it takes one
leading system message only, so later ones (developer messages) become user turns, as for Qwen3.6.
There is no reasoning markup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from gateway.formats._family import Family, ParserFactory, Turns
from gateway.formats._shared import merge_system_messages
from gateway.formats.hf.parser import HermesOutputParser, parse_tool_call

__all__ = ["FAMILY"]

CALL_OPEN, CALL_CLOSE, PLUGIN, INTERPRETER = "<|action_start|>", "<|action_end|>", "<|plugin|>", "<|interpreter|>"


class InternLMParser(HermesOutputParser):
    """Hermes' parser reading a `<|plugin|>` action's JSON (`arguments` or `parameters`) as the call."""

    def _call_of(self, body: bytes) -> tuple[str, str] | None:
        plugin = PLUGIN.encode()
        if not body.startswith(plugin):
            return None
        text = body[len(plugin):].decode("utf-8", errors="replace")
        try:
            call = json.loads(text)
        except ValueError:
            return None
        if isinstance(call, dict) and "parameters" in call and "arguments" not in call:
            name, parameters = call.get("name"), call["parameters"]
            if isinstance(name, str) and name and isinstance(parameters, dict):
                return name, json.dumps(parameters, ensure_ascii=False)
            return None
        return parse_tool_call(text)


def _parsers(vocab: Mapping[str, int]) -> ParserFactory:
    return lambda shared, starts, tools: InternLMParser(shared.token_bytes, shared.markup, shared.stop_ids, starts)


FAMILY = Family(
    name="internlm", tool_parsers=("internlm",), detect=lambda template: CALL_OPEN + PLUGIN in template,
    markers={"think_open": None, "think_close": None, "call_open": CALL_OPEN, "call_close": CALL_CLOSE},
    markup=(PLUGIN, INTERPRETER), needs=(CALL_OPEN, CALL_CLOSE, PLUGIN, INTERPRETER, "<|im_end|>"),
    turns=Turns(stops=("<|im_end|>", "</s>"), terminators=("<|im_end|>",)), prepare=merge_system_messages,
    parsers=_parsers)
