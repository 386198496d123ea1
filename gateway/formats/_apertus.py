"""Swiss AI Apertus: a JSON list of `{NAME: ARGUMENTS}` objects between `<|tools_prefix|>` and `<|tools_suffix|>`.

Apertus writes its calls as one list, each call an object whose one key is the function's name:

    <|tools_prefix|>[{"read_file": {"path": "a.py"}}, {"shell": {"command": ["ls"]}}]<|tools_suffix|>

in `<|assistant_start|>…<|assistant_end|>` turns. It is hermes' JSON between other marker tokens, a
list instead of one call, so the parser is `hf.parser`'s with the section read as the list (whole at
`<|tools_suffix|>`, text as written when it is not such a list), as vLLM's `apertus` parser reads it.
The template is vLLM's `tool_chat_template_apertus.jinja`: tool results follow the calls inside the
model's turn (`[RESULT, …]`), so a call turn ends at `<|tools_suffix|>` (a stop here); it takes one
leading system message only (later ones become user turns, as for Qwen3.6), and it asks for
deliberation with `enable_thinking`. vLLM has no Apertus reasoning
parser, so `<|inner_prefix|>…<|inner_suffix|>` stays in the text there and here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from gateway.formats._family import Family, ParserFactory, Turns
from gateway.formats._shared import merge_system_messages
from gateway.formats.base import ItemDelta, ItemDone
from gateway.formats.hf.parser import HermesOutputParser

__all__ = ["FAMILY"]

CALL_OPEN, CALL_CLOSE, TURN_END = "<|tools_prefix|>", "<|tools_suffix|>", "<|assistant_end|>"


class ApertusParser(HermesOutputParser):
    """Hermes' parser reading the call section as Apertus' list of `{NAME: ARGUMENTS}` objects."""

    def _json_call(self, body: bytes) -> None:
        calls = read_calls(body.decode("utf-8", errors="replace"))
        if calls is None:
            markup = self._markup
            self._raw_text_item(markup.text[markup.call_open] + body + markup.text[markup.call_close])
            return
        for name, arguments in calls:
            index = self._start("tool_call", name)
            self._events += [ItemDelta(index, arguments), ItemDone(index, arguments)]


def read_calls(body: str) -> list[tuple[str, str]] | None:
    """(name, arguments JSON) of each `{NAME: {…}}` in the list, or None when `body` is not such a list."""
    try:
        calls = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(calls, dict):  # one call without its list, as vLLM's parser also takes it
        calls = [calls]
    if not isinstance(calls, list) or not calls:
        return None
    found = []
    for call in calls:
        if not isinstance(call, dict) or len(call) != 1:
            return None
        (name, arguments), = call.items()
        if not name or not isinstance(arguments, dict):
            return None
        found.append((name, json.dumps(arguments, ensure_ascii=False)))
    return found


def _parsers(vocab: Mapping[str, int]) -> ParserFactory:
    return lambda shared, starts, tools: ApertusParser(shared.token_bytes, shared.markup, shared.stop_ids, starts)


FAMILY = Family(
    name="apertus", tool_parsers=("apertus",), detect=lambda template: CALL_OPEN in template,
    markers={"think_open": None, "think_close": None, "call_open": CALL_OPEN, "call_close": CALL_CLOSE},
    needs=(CALL_OPEN, CALL_CLOSE, TURN_END),
    turns=Turns(stops=(TURN_END, CALL_CLOSE), terminators=(TURN_END, CALL_CLOSE)), prepare=merge_system_messages,
    parsers=_parsers)
