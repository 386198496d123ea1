"""Gemma 4 (`gemma4` tool and reasoning parsers): the output parser and the render-side shapes.

Gemma 4 writes a call as

    <|tool_call>call:NAME{key:<|"|>text<|"|>,n:42,flag:true,xs:[1,2],obj:{k:<|"|>v<|"|>}}<tool_call|>

(keys bare, strings between `<|"|>` tokens, several calls back to back are parallel calls), reasons in
`<|channel>thought\\n…<channel|>`, and ends its turn with `<turn|>`, or with `<|tool_response>` after
its calls: the tool results are written into the same model turn (`<|tool_response>response:NAME{…}
<tool_response|>`) and the model goes on from there. Every marker, `<|"|>` included, is a single
added token, so the parser switches on ids as `hf.parser` does: a `<|"|>` spelled out in text pieces
is text inside a string, and no string content can end a string early. A call's body is held until
`<tool_call|>` and read whole, as vLLM's `gemma4` parser reads it (`tool_parsers/gemma4_tool_parser.py`):
bare values are `true`/`false`, `null`/`none`/`nil`, integers or floats, else the bare text; a repeated
key keeps its last value; the arguments stream as `json.dumps(dict, ensure_ascii=False)`. A body that
is not `call:NAME{…}` with a valid name (one of the request's tools when it has tools) is text, as
written.

Rendering: the template iterates `function.arguments | dictsort` and takes tool results as
`tool_responses` on the model message that made the calls, so calls reach it with their arguments as
dicts and `role: tool` messages are folded into the model message before them (`{"name", "response"}`,
the output text); an answer after the results stays a message of its own (the template, given it in
the same message, would close that turn and then leave the next one unopened). The model's stop token `<|tool_response>` is where the template's next message
opens, so it counts as a turn for the splice like GLM's openers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from gateway.core.conversation import Tool
from gateway.formats._family import Family, ParserFactory, Turns
from gateway.formats._shared import argument_dict, is_valid_name
from gateway.formats.base import ItemDelta, ItemDone
from gateway.formats.hf.parser import HermesOutputParser, Markup

__all__ = ["FAMILY"]

CALL_OPEN, CALL_CLOSE, STRING = "<|tool_call>", "<tool_call|>", '<|"|>'
CHANNEL_OPEN, CHANNEL_CLOSE = "<|channel>", "<channel|>"
TURN_OPEN, TURN_CLOSE, RESPONSE_OPEN = "<|turn>", "<turn|>", "<|tool_response>"
TEMPLATE_MARKER = "<|tool_call>call:"
STOP_TOKENS = (TURN_CLOSE, RESPONSE_OPEN)  # besides eos
TURN_TOKENS = (TURN_CLOSE, RESPONSE_OPEN)  # what ends a model turn in a render (the splice counts them)
OPENER_TOKENS = (RESPONSE_OPEN,)  # of those, the one that opens the next message
THOUGHT = b"thought"  # the channel's name, written after `<|channel>`
_NAME = re.compile(r"call:([\w\-.]+)\{")  # vLLM's name pattern
_BARE = re.compile(r"[^,}\]]*")
_SPACE = " \t\r\n"
_MAX_DEPTH = 64


class Gemma4Parser(HermesOutputParser):
    """Output ids in, reasoning / text / tool-call item events out; `markup` has `<|channel>` and
    `<channel|>` for reasoning, `<|tool_call>` / `<tool_call|>` for calls, and `string` is `<|"|>`'s id."""

    def __init__(self, token_bytes: list[bytes], markup: Markup, string: int, stop_ids: frozenset[int],
                 starts_in_reasoning: bool = False, tools: Iterable[Tool] = ()) -> None:
        self._names = frozenset(tool.name for tool in tools)
        self._string = string
        self._pieces: list[bytes] = []  # a call's body split at `<|"|>`: odd pieces are strings
        self._channel_head = starts_in_reasoning
        super().__init__(token_bytes, markup, stop_ids, starts_in_reasoning)

    def _on_markup(self, token_id: int) -> None:
        if self._mode == "tool_call" and token_id == self._string:
            self._pieces.append(bytes(self._call))
            self._call.clear()
            return
        opens_call = self._mode == "text" and token_id == self._markup.call_open
        opens_channel = self._mode == "text" and token_id == self._markup.think_open
        super()._on_markup(token_id)
        if opens_call:
            self._pieces = []
        if opens_channel:
            self._channel_head = True

    def _flush(self, final: bool = False) -> None:
        if self._channel_head and self._mode == "reasoning":
            head = bytes(self._pending)
            if len(head) < len(THOUGHT) + 1 and THOUGHT.startswith(head.rstrip(b"\n")) and not final:
                return  # maybe the channel's name still
            self._channel_head = False
            if head.startswith(THOUGHT + b"\n") or head == THOUGHT:
                del self._pending[:len(THOUGHT)]
        super()._flush(final)

    def finish(self):
        if self._mode == "tool_call":
            self._call[:] = _joined([*self._pieces, bytes(self._call)])
        return super().finish()

    def _json_call(self, body: bytes) -> None:
        pieces = [*self._pieces, body]
        call = parse_call([piece.decode("utf-8", errors="replace") for piece in pieces], self._names)
        if call is None:
            markup = self._markup
            self._raw_text_item(markup.text[markup.call_open] + _joined(pieces) + markup.text[markup.call_close])
            return
        name, arguments = call
        text = json.dumps(arguments, ensure_ascii=False)
        index = self._start("tool_call", name)
        self._events += [ItemDelta(index, text), ItemDone(index, text)]


def _joined(pieces: list[bytes]) -> bytes:
    return STRING.encode().join(pieces)


def parse_call(pieces: list[str], names: frozenset[str] = frozenset()) -> tuple[str, dict[str, Any]] | None:
    """(name, arguments) of a call body split at its `<|"|>` tokens (odd pieces are strings), or None."""
    head = _NAME.match(pieces[0])
    if head is None or not is_valid_name(head[1]) or (names and head[1] not in names):
        return None
    reader = _Reader(pieces, head.end())
    try:
        arguments = reader.object_body(0)
        reader.skip_space()
    except ValueError:
        return None
    return (head[1], arguments) if reader.at_end() else None


class _Reader:
    """A cursor over the body's pieces: structure in even pieces, whole strings as odd ones."""

    def __init__(self, pieces: list[str], start: int) -> None:
        self._pieces = pieces
        self._piece = 0
        self._at = start

    def at_end(self) -> bool:
        return self._piece == len(self._pieces) - 1 and self._at == len(self._pieces[-1])

    def skip_space(self) -> None:
        text = self._pieces[self._piece]
        while self._at < len(text) and text[self._at] in _SPACE:
            self._at += 1

    def _peek(self) -> str:
        """The next structural character, '"' for a string, '' at the end of the body."""
        self.skip_space()
        if self._at < len(self._pieces[self._piece]):
            return self._pieces[self._piece][self._at]
        return '"' if self._piece + 2 < len(self._pieces) else ""

    def _string(self) -> str:
        if self._piece + 2 >= len(self._pieces):
            raise ValueError("unterminated string")
        value = self._pieces[self._piece + 1]
        self._piece += 2
        self._at = 0
        return value

    def _take(self, char: str) -> None:
        if self._peek() != char:
            raise ValueError(f"expected {char!r}")
        self._at += 1

    def object_body(self, depth: int) -> dict[str, Any]:
        """Members up to and including the closing `}`."""
        members: dict[str, Any] = {}
        while self._peek() != "}":
            if members:
                self._take(",")
            key = self._key()
            self._take(":")
            members[key] = self._value(depth)
        self._at += 1
        return members

    def _key(self) -> str:
        if self._peek() == '"':
            return self._string()
        text = self._pieces[self._piece]
        end = text.find(":", self._at)
        key = text[self._at:end].strip() if end >= 0 else ""
        if not key or any(c in key for c in "{}[],"):
            raise ValueError("no key")
        self._at = end
        return key

    def _value(self, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise ValueError("too deep")
        char = self._peek()
        if char == '"':
            return self._string()
        if char == "{":
            self._at += 1
            return self.object_body(depth + 1)
        if char == "[":
            self._at += 1
            items: list[Any] = []
            while self._peek() != "]":
                if items:
                    self._take(",")
                items.append(self._value(depth + 1))
            self._at += 1
            return items
        text = self._pieces[self._piece]
        match = _BARE.match(text, self._at)
        assert match is not None
        word = match[0].strip()
        if not word:
            raise ValueError("no value")
        self._at = match.end()
        return _bare(word)


def _bare(word: str) -> Any:
    """A value written without `<|"|>`, as vLLM reads one."""
    if word in ("true", "false"):
        return word == "true"
    if word.lower() in ("null", "none", "nil"):
        return None
    try:
        return float(word) if "." in word else int(word)
    except ValueError:
        return word


# Rendering ------------------------------------------------------------------------------------

def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`hf_messages`' messages as Gemma 4's template takes them: arguments as dicts, tool results
    as `tool_responses` on the model message before them (a new one when there is none)."""
    shaped: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for message in messages:
        if message["role"] == "tool":
            name = message.get("name") or names.get(message.get("tool_call_id", ""), "unknown")
            previous = shaped[-1] if shaped and shaped[-1]["role"] == "assistant" else None
            if previous is None or previous.get("content"):
                previous = {"role": "assistant", "content": ""}
                shaped.append(previous)
            previous.setdefault("tool_responses", []).append({"name": name, "response": message["content"]})
            continue
        calls = message.get("tool_calls")
        if calls:
            names.update({call.get("id", ""): call["function"]["name"] for call in calls})
            calls = [{**call, "function": {**call["function"],
                                           "arguments": argument_dict(call["function"]["arguments"])}}
                     for call in calls]
            message = {**message, "tool_calls": calls}
        shaped.append(dict(message))
    return shaped


def _parsers(vocab: dict[str, int]) -> ParserFactory:
    string = vocab[STRING]
    return lambda shared, starts, tools: Gemma4Parser(shared.token_bytes, shared.markup, string, shared.stop_ids,
                                                      starts, tools)


# `<|tool_response>` ends a model turn by opening its results; `<|"|>` delimits strings in a call, out of one text.
FAMILY = Family(
    name="gemma4", tool_parsers=("gemma4",), reasoning_parsers=("gemma4",),
    detect=lambda template: TEMPLATE_MARKER in template,
    markers={"think_open": CHANNEL_OPEN, "think_close": CHANNEL_CLOSE, "call_open": CALL_OPEN,
             "call_close": CALL_CLOSE},
    markup=(STRING,), needs=(STRING, *TURN_TOKENS),
    turns=Turns(stops=STOP_TOKENS, terminators=TURN_TOKENS, openers=OPENER_TOKENS),
    prepare=template_messages, parsers=_parsers, image="<|image|>")
