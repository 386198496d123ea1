"""Tool calls in Qwen3-Coder's XML: the streaming parser of Qwen3.5/3.6, Qwen3-Coder, Nemotron 3,
Seed-OSS and Step-3.5 (`qwen_xml`, `seed_oss`, `step3p5` declare the families).

These models write a call as

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

(several blocks in a row are parallel calls). `<tool_call>` and `</tool_call>` are single added
tokens, so the parser switches in and out of a call on ids as `hf.parser` does; the markup inside
is plain text, read by a small state machine over the call's decoded text. Parameter values are
converted by the tool's JSON-schema type exactly as vLLM's `qwen3_coder` parser converts them
(`vllm/tool_parsers/qwen3coder_tool_parser.py`, `_convert_param_value`: strings stay strings,
integers, numbers, booleans, null, arrays and objects are parsed, an unparsable value falls back
to its text), and the arguments stream as the JSON object vLLM returns
(`json.dumps(arguments, ensure_ascii=False)`): `{"path": "` … `a.py` … `"}`. A string value
streams as it is written; a typed one comes out whole when its `</parameter>` closes it.

Markup inside a value is text unless it is structural, as vLLM decides: a `</parameter>` closes
the value only when what follows it (after whitespace) is `<parameter=` (a parameter of this
tool, when its schema is known), `</tool_call>` or the end, or `</function>` followed by one of
those (vLLM takes any `</function>` there, and then misreads a value that holds
`</parameter></function>`); a `<parameter=` that starts a line opens a nested literal block
whose `</parameter>` is text. Unlike vLLM, which sees
the whole output, a streaming parser must decide as it goes, so two malformations are repaired
by rule instead of by hindsight: a `<parameter=KEY>` starting a line, for a KEY of the tool not
seen yet, ends an unclosed value (vLLM's "missing </parameter>" repair), and a parameter given
twice keeps its first value (the first is already streamed). One more leniency: a `<tool_call>`
block whose body is a hermes JSON call (`{"name": …, "arguments": …}`) is taken as that call.
A block without `<function=NAME>` (or with a NAME vLLM rejects) is text, as is an unfinished one.
"""

from __future__ import annotations

import ast
import codecs
import json
from collections.abc import Iterable
from typing import Any

from gateway.core.conversation import Tool
from gateway.formats._call_section import CallSectionParser
from gateway.formats._family import ParserFactory
from gateway.formats._schema_values import properties
from gateway.formats.hf.parser import Markup

__all__ = ["FUNCTION_OPEN", "PARAMETER_OPEN", "XmlToolCallParser", "convert_param_value", "parsers"]

FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
PARAMETER_OPEN = "<parameter="
PARAMETER_CLOSE = "</parameter>"
MAX_NAME = 256  # a function or parameter name longer than this is not markup
_FORBIDDEN_IN_NAME = frozenset("{}<>\"' \t\n\r")
_STRING_TYPES = ("string", "str", "text", "varchar", "char", "enum")

# States of a call body
_HEAD, _BODY, _VALUE, _AFTER, _RAW = range(5)


class XmlToolCallParser(CallSectionParser):
    """Output ids in, reasoning / text / tool-call item events out; tool calls in Qwen's XML. The
    call's bytes stay in `self._call` (a body that is no call is text as written), read as they come."""

    def __init__(self, token_bytes: list[bytes], markup: Markup, stop_ids: frozenset[int],
                 starts_in_reasoning: bool = False, tools: Iterable[Tool] = ()) -> None:
        self._schemas = {tool.name: properties(tool.parameters) for tool in tools}
        super().__init__(token_bytes, markup, stop_ids, starts_in_reasoning)
        self._reset_call()

    # CallSectionParser hooks -----------------------------------------------------------------

    def _finish_section(self) -> None:
        self._end_body(closed=False)

    def _section_markup(self, token_id: int) -> None:
        if token_id == self._markup.call_close:
            self._end_body(closed=True)
            self._section_closed()
        else:
            self._call += self._markup.text[token_id]  # a marker inside the call is its text

    def _end_body(self, closed: bool) -> None:
        """`</tool_call>` (`closed`) or the end of output: the function ends; a body without one is
        a hermes JSON call when closed (that call, or text), else text as written."""
        self._consume()
        if self._state not in (_HEAD, _RAW):
            self._close_call()
        elif closed:
            self._json_call(bytes(self._call))
        else:
            self._raw_text_item(b"%s%s" % (self._markup.text[self._markup.call_open], bytes(self._call)))
        self._call.clear()

    # The call body's state machine ----------------------------------------------------------

    def _reset_call(self) -> None:
        self._state = _HEAD
        self._read = 0  # bytes of self._call decoded so far
        self._call_utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._text = ""  # decoded, not yet consumed
        self._properties: dict[str, Any] = {}
        self._seen: set[str] = set()
        self._param: str | None = None
        self._param_streams = False  # a string value: streamed as it comes
        self._skip_param = False  # a repeated parameter: read, not emitted
        self._value: list[str] = []  # a typed value's text (or a skipped one's)
        self._held_newline = False  # a streamed value's last "\n", which a closing tag would drop
        self._value_started = False  # the value's first character (a "\n" to drop) was seen
        self._line_start = True  # the value so far ends a line (a nested `<parameter=` may open)
        self._depth = 0  # nested literal <parameter=…> blocks open inside the value

    def _consume(self) -> None:
        if self._read < len(self._call):
            self._text += self._call_utf8.decode(bytes(self._call[self._read:]))
            self._read = len(self._call)
        while self._text and self._step():
            pass

    def _step(self) -> bool:
        """Consume what the state can decide from `self._text`; False: wait for more."""
        if self._state == _HEAD:
            return self._read_function()
        if self._state == _BODY:
            return self._read_between()
        if self._state == _VALUE:
            return self._read_value()
        self._text = ""  # _AFTER (after </function>) and _RAW ignore the rest
        return False

    def _read_function(self) -> bool:
        text = self._text.lstrip()
        if len(text) < len(FUNCTION_OPEN):
            if not FUNCTION_OPEN.startswith(text):
                self._state = _RAW
            return False
        end = text.find(">", len(FUNCTION_OPEN))
        if not text.startswith(FUNCTION_OPEN) or (end == -1 and len(text) > len(FUNCTION_OPEN) + MAX_NAME):
            self._state = _RAW
            return False
        if end == -1:
            return False
        name = text[len(FUNCTION_OPEN):end]
        if not _is_valid_name(name):
            self._state = _RAW
            return False
        self._text = text[end + 1:]
        self._state = _BODY
        self._start_object(name, self._schemas.get(name, {}))
        return True

    def _read_between(self) -> bool:
        """Between parameters: whitespace, `<parameter=KEY>`, `</function>`; anything else is skipped."""
        text = self._text.lstrip()
        self._text = text
        if not text:
            return False
        if text.startswith(FUNCTION_CLOSE):
            self._text = text[len(FUNCTION_CLOSE):]
            self._close_call()
            self._state = _AFTER
            return True
        if text.startswith(PARAMETER_OPEN):
            end = text.find(">", len(PARAMETER_OPEN))
            if end == -1:
                if len(text) > len(PARAMETER_OPEN) + MAX_NAME:
                    self._text = text[1:]
                    return True
                return False
            self._open_param(text[len(PARAMETER_OPEN):end])
            self._text = text[end + 1:]
            return True
        if PARAMETER_OPEN.startswith(text) or FUNCTION_CLOSE.startswith(text):
            return False
        stray = text.find("<", 1)
        self._text = text[stray:] if stray != -1 else ""
        return True

    def _open_param(self, name: str) -> None:
        self._state = _VALUE
        self._param = name
        self._skip_param = name in self._seen
        self._seen.add(name)
        self._param_streams = not self._skip_param and _streams_as_text(self._properties.get(name, None),
                                                                         name in self._properties)
        self._value = []
        self._held_newline = False
        self._value_started = False
        self._line_start = True
        self._depth = 0
        if self._skip_param:
            return
        self._member(name, '"' if self._param_streams else "")

    def _read_value(self) -> bool:
        text = self._text
        if not self._value_started:
            self._value_started = True
            text = text.removeprefix("\n")
        i = text.find("<")
        if i == -1:
            self._value_text(text)
            self._text = ""
            return False
        if i:
            self._value_text(text[:i])
            text = text[i:]
        self._text = text
        # text starts with "<": markup, or not yet decidable, or literal
        if text.startswith(PARAMETER_CLOSE):
            if self._depth:
                self._depth -= 1
                return self._literal(len(PARAMETER_CLOSE))
            after = text[len(PARAMETER_CLOSE):]
            verdict = self._structural_after(after)
            if verdict is None:
                return False
            if verdict:
                self._text = after
                self._close_param()
                return True
            return self._literal(len(PARAMETER_CLOSE))
        if text.startswith(PARAMETER_OPEN) and self._line_start:
            end = text.find(">", len(PARAMETER_OPEN))
            if end == -1:
                if len(text) > len(PARAMETER_OPEN) + MAX_NAME:
                    return self._literal(1)
                return False
            name = text[len(PARAMETER_OPEN):end]
            if self._depth == 0 and name in self._properties and name not in self._seen:
                self._close_param()  # the model left the value unclosed: this parameter ends it
                return True
            self._depth += 1
            return self._literal(end + 1)
        if text.startswith(FUNCTION_CLOSE) and self._depth == 0 and self._line_start:
            rest = text[len(FUNCTION_CLOSE):]
            if rest.strip():
                return self._literal(len(FUNCTION_CLOSE))
            return False  # structural only if the call ends right here (see _close_call)
        if any(tag.startswith(text) for tag in (PARAMETER_CLOSE, PARAMETER_OPEN, FUNCTION_CLOSE)):
            return False
        return self._literal(1)

    def _structural_after(self, after: str) -> bool | None:
        """Whether a `</parameter>` followed by `after` closes the value; None: cannot tell yet."""
        rest = after.lstrip()
        if not rest:
            return None
        if rest.startswith(FUNCTION_CLOSE):  # structural if the call ends after it (decided there)
            return None if not rest[len(FUNCTION_CLOSE):].strip() else False
        if rest.startswith(PARAMETER_OPEN):
            end = rest.find(">", len(PARAMETER_OPEN))
            if end == -1:
                return None if len(rest) <= len(PARAMETER_OPEN) + MAX_NAME else False
            return not self._properties or rest[len(PARAMETER_OPEN):end] in self._properties
        if PARAMETER_OPEN.startswith(rest) or FUNCTION_CLOSE.startswith(rest):
            return None
        return False

    def _literal(self, n: int) -> bool:
        self._value_text(self._text[:n])
        self._text = self._text[n:]
        return True

    def _value_text(self, text: str) -> None:
        if not text:
            return
        self._line_start = text.endswith("\n")
        if not self._param_streams:
            self._value.append(text)
            return
        if self._held_newline:
            text = "\n" + text
        self._held_newline = text.endswith("\n")
        if self._held_newline:
            text = text[:-1]
        if text:
            self._emit(json.dumps(text, ensure_ascii=False)[1:-1])

    def _close_param(self) -> None:
        """The value ends here (its last "\\n", if any, was the markup's)."""
        self._state = _BODY
        if self._skip_param:
            return
        if self._param_streams:
            self._emit('"')
            return
        raw = "".join(self._value)
        raw = raw.removesuffix("\n")
        assert self._param is not None
        value = convert_param_value(raw, self._param, self._properties)
        self._emit(json.dumps(value, ensure_ascii=False))

    def _close_call(self) -> None:
        """The function ends (`</function>`, `</tool_call>` or the end of output). An open value
        ends too; what is left unread of it is markup the model had begun (a closing tag waiting
        for what follows it), not value."""
        if self._state == _AFTER or self._call_index is None:
            return
        if self._state == _VALUE:
            self._text = ""
            self._close_param()
        self._end_object()
        self._state = _AFTER


def _is_valid_name(name: str) -> bool:
    """vLLM's `_is_valid_function_name`: not empty, no template or markup characters."""
    return bool(name) and not any(c in _FORBIDDEN_IN_NAME for c in name)


def _param_type(config: Any) -> tuple[str, bool]:
    """(type, allows null) of a parameter's schema, read as vLLM reads it."""
    if isinstance(config, dict) and "type" in config:
        param_type = str(config["type"]).strip().lower()
        return param_type, param_type == "null"
    if isinstance(config, dict) and "anyOf" in config:
        param_type, allows_null, picked = "string", False, False
        for option in config["anyOf"]:
            if isinstance(option, dict) and "type" in option:
                option_type = str(option["type"]).strip().lower()
                if option_type == "null":
                    allows_null = True
                elif not picked:
                    param_type, picked = option_type, True
        return param_type, allows_null
    return "string", False


def _streams_as_text(config: Any, known: bool) -> bool:
    """Whether a value is its own text whatever it says (so it can stream as written)."""
    if not known:
        return True
    param_type, allows_null = _param_type(config)
    return param_type in _STRING_TYPES and not allows_null


def convert_param_value(value: str, name: str, properties: dict[str, Any]) -> Any:
    """A parameter's text as the JSON value vLLM's `qwen3_coder` parser makes of it."""
    if name not in properties:
        return value
    param_type, allows_null = _param_type(properties[name])
    if allows_null and value.lower() in ("null", "none"):
        return None
    if param_type in _STRING_TYPES:
        return value
    if value.lower() in ("null", "none"):
        return None
    if param_type.startswith(("int", "uint", "long", "short", "unsigned")):
        try:
            return int(value)
        except (ValueError, TypeError):
            return value
    if param_type.startswith(("num", "float")):
        try:
            number = float(value)
            return number if number - int(number) != 0 else int(number)
        except (ValueError, TypeError, OverflowError):
            return value
    if param_type in ("boolean", "bool", "binary"):
        return value.lower() == "true"
    container = param_type in ("object", "array", "arr") or param_type.startswith(("dict", "list"))
    if container:
        try:
            parsed = json.loads(value)
            if isinstance(parsed, str):
                try:
                    parsed = ast.literal_eval(parsed)
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    pass
            return _json_safe(parsed, value)
        except (ValueError, TypeError, RecursionError):
            pass
    try:
        parsed = ast.literal_eval(value)
        if container and isinstance(parsed, str):
            try:
                parsed = ast.literal_eval(parsed)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                pass
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value
    return _json_safe(parsed, value)


def _json_safe(value: Any, text: str) -> Any:
    """`value` if it serializes as JSON (literal_eval also makes tuples, sets, bytes, complex
    numbers, which vLLM would fail to serialize), else the text it came from."""
    try:
        json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return text
    return value


def parsers(vocab: dict[str, int]) -> ParserFactory:
    """The XML call parser, for this family and the ones writing Qwen3's calls under other markers."""
    return lambda shared, starts, tools: XmlToolCallParser(shared.token_bytes, shared.markup, shared.stop_ids,
                                                           starts, tools)
