"""Tool calls as one JSON list making the whole answer: xLAM's (`xlam`) and Phi-4-mini's (`phi4_mini_json`).

xLAM answers a call with `[{"name": "read_file", "arguments": {"path": "a.py"}}, …]` and Phi-4-mini
with the same list after the word `functools`: `functools[{"name": …, "arguments": {…}}]`. Neither
has a marker token, so, as with Llama 3's JSON calls (`llama3_json`; `held_calls` reads
both), an output that starts with the list's opener is held and read whole at its end: calls when
it is a JSON list of objects each with a `name` (one of the request's tools, when it has tools) and
`arguments` (or `parameters`) an object, else text as written. vLLM's `xlam` and `phi4_mini_json`
parsers read the same lists.
"""

from __future__ import annotations

import json

from gateway.formats._family import CHATML, Family, ParserFactory, Turns
from gateway.formats._held_calls import HeldCallsParser
from gateway.formats._shared import json_call_list, with_argument_dicts

__all__ = ["PHI4_MINI", "XLAM"]


class JsonListParser(HeldCallsParser):
    """The held-output parser reading a JSON list of calls after `opener`."""

    opener = b"["

    def read_calls(self, text: str) -> list[tuple[str, str]] | None:
        prefix = self.opener[:-1].decode()
        body = text.strip()
        if not body.startswith(prefix):
            return None
        calls = json_call_list(body[len(prefix):])
        if calls is None:
            return None
        found = []
        for call in calls:
            arguments = call.get("arguments", call.get("parameters", {}))
            if not call["name"] or not isinstance(arguments, dict) or (self._names and call["name"] not in self._names):
                return None
            found.append((call["name"], json.dumps(arguments, ensure_ascii=False)))
        return found


class FunctoolsParser(JsonListParser):
    opener = b"functools["


def _parsers(parser: type[JsonListParser]) -> ParserFactory:
    return lambda shared, starts, tools: parser(shared.token_bytes, shared.markup, shared.stop_ids, tools)


XLAM = Family(
    name="xlam", tool_parsers=("xlam",), detect=lambda template: "Salesforce xLAM" in template,
    markers={"call_open": None, "call_close": None}, turns=CHATML, prepare=with_argument_dicts,
    parsers=lambda vocab: _parsers(JsonListParser))
PHI4_MINI = Family(
    name="phi4_mini_json", tool_parsers=("phi4_mini_json",), detect=lambda template: "functools[" in template,
    markers={"call_open": None, "call_close": None},
    turns=Turns(stops=("<|end|>", "<|endoftext|>"), terminators=("<|end|>",)),
    parsers=lambda vocab: _parsers(FunctoolsParser))
