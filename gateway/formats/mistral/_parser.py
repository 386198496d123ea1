"""Streaming parser for Mistral / Devstral / Magistral output: `[THINK]` reasoning and `[TOOL_CALLS]`.

Tekken's control tokens are single ids, so the parser switches state on ids, as `hf.parser` does
for `<think>` and `<tool_call>`: a marker typed out in text (`[TOOL_CALLS]` inside an argument
string) is text. Two layouts, by tokenizer version (what mistral-common's encoder writes back):

- v11 and later (Mistral Small 3.1+, Devstral, Magistral): one call after each marker,
  `[TOOL_CALLS]NAME[ARGS]{json}`, v11 optionally `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{json}`; the
  arguments run to the next `[TOOL_CALLS]` or the end of the output (`</s>`) and stream as
  written, as vLLM's `mistral` parser streams them.
- before v11 (Mistral 7B v0.3, Nemo): `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`, one JSON
  list read whole at the end; arguments come out as `json.dumps(arguments, ensure_ascii=False)`,
  the text the encoder renders back.

A name is accepted as the other families accept one (one of the request's tools when it has tools,
otherwise any name without markup characters); a call with another name, no `[ARGS]`, or a list
that is not one of calls is text with its markers. A nine-character alphanumeric id the model
wrote is kept as the call's id (Mistral's id shape), so the call renders back to what it wrote.

Reasoning: Magistral opens `[THINK]` itself (no generation prompt opens it) and closes it with
`[/THINK]`; versions without the two tokens never reason in markup.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable

from gateway.core.conversation import Tool
from gateway.formats._call_section import CallSectionParser
from gateway.formats._shared import MAX_NAME, accepts_name, json_call_list
from gateway.formats.hf.parser import Markup

__all__ = ["CALL_ID_SHAPE", "MistralToolCallParser"]

CALL_ID_SHAPE = re.compile(r"[a-zA-Z0-9]{9}")

# States of a call
_NAME, _ID, _ARGS, _RAW, _LIST = range(5)


class MistralToolCallParser(CallSectionParser):
    """Output ids in, reasoning / text / tool-call item events out (see `OutputParser`).
    `markup.call_open` is `[TOOL_CALLS]` (there is no closing marker); `args` and `call_id` are the
    ids of `[ARGS]` and `[CALL_ID]` (None in versions before v11, which write a JSON list)."""

    trim_newlines = False  # no newline is Mistral's markup: text items are the model's text

    def __init__(self, token_bytes: list[bytes], markup: Markup, args: int | None, call_id: int | None,
                 stop_ids: frozenset[int], tools: Iterable[Tool] = ()) -> None:
        self._names = frozenset(tool.name for tool in tools)
        self._args, self._call_id = args, call_id
        super().__init__(token_bytes, markup, stop_ids, starts_in_reasoning=False)
        self._reset_call()

    # CallSectionParser hooks -----------------------------------------------------------------

    def _finish_section(self) -> None:
        self._consume()
        self._end_call()

    def _section_markup(self, token_id: int) -> None:
        text = self._markup.text[token_id]
        if token_id == self._markup.call_open and self._state != _LIST:
            self._end_call()
            self._reset_call()
        elif token_id == self._call_id and self._state == _NAME:
            self._raw += text
            self._state = _ID
        elif token_id == self._args and self._state in (_NAME, _ID):
            self._raw += text
            self._decide()
        elif self._state == _ARGS:
            self._emit(text.decode())  # a stray marker inside the arguments is argument text
        else:
            self._raw += text
            if self._state != _LIST:
                self._state = _RAW

    # A call -------------------------------------------------------------------------------------

    def _reset_call(self) -> None:
        self._state = _NAME if self._args is not None else _LIST
        self._raw = bytearray(self._markup.text[self._markup.call_open])  # the call as written
        self._name = bytearray()
        self._id = bytearray()
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _read(self, data: bytes) -> None:
        if self._state == _ARGS:
            self._emit(self._utf8.decode(data))
            return
        self._raw += data
        if self._state == _NAME:
            self._name += data
            if len(self._name) > 4 * MAX_NAME:
                self._state = _RAW
        elif self._state == _ID:
            self._id += data

    def _decide(self) -> None:
        name = self._name.decode("utf-8", errors="replace")
        if not accepts_name(name, self._names):
            self._state = _RAW
            return
        written = self._id.decode("utf-8", errors="replace")
        self._start_call(name, written if CALL_ID_SHAPE.fullmatch(written) else None)
        self._state = _ARGS

    def _end_call(self) -> None:
        """The next `[TOOL_CALLS]` or the end of output: the call ends with what it has."""
        if self._state == _ARGS:
            self._emit(self._utf8.decode(b"", final=True))
            self._end_arguments()
        elif self._state == _LIST:
            self._list_calls()
        else:
            self._raw_text_item(bytes(self._raw))

    def _list_calls(self) -> None:
        """A pre-v11 `[TOOL_CALLS][{…}, …]` list as calls; as text when it is not one."""
        body = bytes(self._raw[len(self._markup.text[self._markup.call_open]):]).decode("utf-8", errors="replace")
        calls = _json_calls(body, self._names)
        if calls is None:
            self._raw_text_item(bytes(self._raw))
        else:
            self._whole_calls(calls)


def _json_calls(body: str, names: frozenset[str]) -> list[tuple[str, str, str | None]] | None:
    calls = json_call_list(body)
    if calls is None:
        return None
    parsed = []
    for call in calls:
        name, arguments, call_id = call["name"], call.get("arguments", {}), call.get("id")
        if not accepts_name(name, names):
            return None
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        valid_id = isinstance(call_id, str) and CALL_ID_SHAPE.fullmatch(call_id)
        parsed.append((name, text, call_id if valid_id else None))
    return parsed
