"""Streaming parser for gpt-oss output: harmony tokens in, item events out.

openai-harmony's `StreamableParser` parses the headers; this wrapper turns its message
boundaries into ItemStarted/ItemDelta/ItemDone. Boundaries are recognised by token id
(`<|message|>` opens content, `<|end|>`, `<|return|>`, `<|call|>` close it). Content tokens
are decoded here, the way `StreamableParser` decodes them (UTF-8 held back until complete, an
invalid sequence as U+FFFD), and not handed to it: for each content token it also re-encodes
the delta into tokens (~10k instructions, a seventh of a relayed token). It sees each message's end,
with no content, and so stays in step for the next header.

Malformed output (a header harmony rejects, text where `<|start|>` is expected)
never raises: the open item is closed, the unparsed tokens are decoded as a plain
text item, and parsing resumes at the next `<|start|>`.
"""

from __future__ import annotations

import codecs
import functools
import logging
from collections.abc import Sequence

from openai_harmony import HarmonyEncoding, HarmonyError, Role, StreamableParser

from gateway.formats.base import ItemDelta, ItemDone, ItemKind, ItemStarted, ParseEvent

__all__ = ["HarmonyParser"]

log = logging.getLogger(__name__)

_CHANNEL_ITEMS: dict[str, tuple[ItemKind, str | None]] = {
    "analysis": ("reasoning", None),
    "commentary": ("text", "commentary"),
    "final": ("text", "final"),
}


@functools.lru_cache(maxsize=4)
def _marker_ids(encoding: HarmonyEncoding) -> tuple[int, int, int, frozenset[int]]:
    """<|start|>, <|message|>, <|endoftext|> (a stop id harmony would decode as content) and the
    message ends <|end|> <|return|> <|call|>. Once per encoding: `encode` with special tokens
    builds a regex of them all, which per parser cost more than parsing a 500-token answer."""
    start, message, end_of_text = (encoding.encode(name, allowed_special={name})[0]
                                   for name in ("<|start|>", "<|message|>", "<|endoftext|>"))
    return start, message, end_of_text, frozenset(encoding.stop_tokens())


@functools.lru_cache(maxsize=4)
def _token_bytes(encoding: HarmonyEncoding) -> dict[int, bytes]:
    """Each content token's bytes, filled as tokens are first seen; one table per encoding."""
    return {}


REPLACEMENT = "\ufffd"


class HarmonyParser:
    def __init__(self, encoding: HarmonyEncoding) -> None:
        self._encoding = encoding
        self._start_token, self._message_token, self._end_of_text, self._message_ends = _marker_ids(encoding)
        self._silent = self._message_ends | {self._end_of_text}  # never text, even in raw mode
        # The prompt ends with `<|start|>assistant`: output begins inside a header.
        self._parser: StreamableParser | None = StreamableParser(encoding, Role.ASSISTANT)
        self._header: list[int] = []  # tokens of the header being read
        self._in_content = False
        self._raw = codecs.getincrementaldecoder("utf-8")("replace")
        self._token_bytes = _token_bytes(encoding)
        self._undecoded = b""  # content bytes of an incomplete UTF-8 sequence
        self._undecodable = False  # the message's content had an id beyond the vocabulary
        self._index = -1  # index of the open item, or of the last one
        self._open = False
        self._parts: list[str] = []
        self._reasoning = False  # the open item is reasoning (the analysis channel)
        self.reasoning_tokens = 0  # tokens of reasoning content, the closing `<|end|>` included

    @property
    def in_tool_call(self) -> bool:
        """A message header is being read: it may name a tool, so a steer waits for it (and for the
        call it opens) to end — cut inside, the header would come out as text."""
        return bool(self._header)

    def feed(self, token_ids: Sequence[int]) -> list[ParseEvent]:
        events: list[ParseEvent] = []
        for token in token_ids:
            if token == self._end_of_text:
                continue  # generation ends here; finish() closes what is open
            if self._parser is None:
                self._raw_token(token, events)
                continue
            if self._in_content:
                if self._reasoning:
                    self.reasoning_tokens += 1
                if token not in self._message_ends:
                    if delta := self._content_delta(token):
                        self._parts.append(delta)
                        events.append(ItemDelta(self._index, delta))
                    continue
            try:
                self._parser.process(token)
            except HarmonyError as exc:
                self._malformed(token, exc, events)
                continue
            if self._in_content:  # the message's end
                self._in_content = False
                self._undecoded, self._undecodable = b"", False
                self._close(events)
            elif token == self._message_token:
                self._in_content = True
                self._header.clear()
                self._start_item(events)
            else:
                self._header.append(token)
        return events

    def finish(self) -> list[ParseEvent]:
        """Close whatever the generation left open (cut by the length limit, or raw text)."""
        events: list[ParseEvent] = []
        if self._parser is None:
            self._raw_text(self._raw.decode(b"", final=True), events)
        elif self._in_content:
            self._in_content = False
        elif self._header:
            log.warning("generation ended inside a harmony message header; emitting it as text")
            self._raw_tokens(self._header, events)
            self._raw_text(self._raw.decode(b"", final=True), events)
        self._header.clear()
        self._close(events)
        return events

    def _start_item(self, events: list[ParseEvent]) -> None:
        parser = self._parser
        assert parser is not None
        recipient = parser.current_recipient
        channel = parser.current_channel
        kind: ItemKind
        name = None
        if parser.current_role != Role.ASSISTANT:
            log.warning("model wrote a %s message; passing it on as text", parser.current_role)
            kind, channel = "text", None
        elif recipient and recipient.startswith("functions."):
            kind, name, channel = "tool_call", recipient.removeprefix("functions."), None
        elif recipient:
            log.warning("model called unsupported tool %r; passing the call on as text", recipient)
            kind, channel = "text", None
        elif channel in _CHANNEL_ITEMS:
            kind, channel = _CHANNEL_ITEMS[channel]
        else:
            log.warning("model wrote to unknown harmony channel %r; passing it on as text", channel)
            kind, channel = "text", None
        self._open_item(events, kind, name, channel)

    def _open_item(self, events: list[ParseEvent], kind: ItemKind, name: str | None, channel: str | None) -> None:
        self._index += 1
        self._open = True
        self._reasoning = kind == "reasoning"
        self._parts = []
        events.append(ItemStarted(self._index, kind, name=name, channel=channel))

    def _content_delta(self, token: int) -> str:
        """The text a content token adds, as `StreamableParser` decodes it: the bytes so far
        when they are valid UTF-8; else the valid part, and one U+FFFD for an invalid sequence
        (what follows it waits for the next token) or nothing more for an incomplete one."""
        if self._undecodable:
            return ""
        try:
            token_bytes = self._bytes_of(token)
        except HarmonyError:  # an id beyond the vocabulary: harmony's parser waits on it to the message's end
            self._undecodable = True
            return ""
        data = self._undecoded + token_bytes if self._undecoded else token_bytes
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            text = data[:exc.start].decode()
            if exc.reason == "unexpected end of data":  # the rest of the character comes later
                self._undecoded = data[exc.start:]
            else:
                text += REPLACEMENT
                self._undecoded = data[exc.end:]
            return text
        self._undecoded = b""
        return text

    def _bytes_of(self, token: int) -> bytes:
        data = self._token_bytes.get(token)
        if data is None:
            data = self._token_bytes[token] = self._encoding.decode(
                [token], errors="surrogateescape").encode("utf-8", "surrogateescape")
        return data

    def _close(self, events: list[ParseEvent]) -> None:
        if self._open:
            self._open = False
            events.append(ItemDone(self._index, "".join(self._parts)))

    def _malformed(self, token: int, exc: HarmonyError, events: list[ParseEvent]) -> None:
        log.warning("malformed harmony output (%s); passing the rest of the message on as text", exc)
        self._close(events)
        self._parser = None
        self._in_content = False
        self._raw_tokens([*self._header, token], events)
        self._header.clear()

    def _raw_token(self, token: int, events: list[ParseEvent]) -> None:
        if token == self._start_token:  # a new message: resume parsing there
            self._raw_text(self._raw.decode(b"", final=True), events)
            self._close(events)
            self._parser = StreamableParser(self._encoding, None)
            self._parser.process(token)
            self._header.append(token)
        elif token not in self._silent:
            self._raw_tokens([token], events)

    def _raw_tokens(self, tokens: list[int], events: list[ParseEvent]) -> None:
        tokens = [t for t in tokens if t not in self._silent]
        # surrogateescape keeps the exact bytes of partial UTF-8 sequences for the incremental decoder
        data = self._encoding.decode(tokens, errors="surrogateescape").encode("utf-8", "surrogateescape")
        self._raw_text(self._raw.decode(data), events)

    def _raw_text(self, text: str, events: list[ParseEvent]) -> None:
        if not text:
            return
        if not self._open:
            self._open_item(events, "text", None, None)
        self._parts.append(text)
        events.append(ItemDelta(self._index, text))
