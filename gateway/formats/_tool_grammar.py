"""A custom tool's grammar (Lark or a regex) as the EBNF vLLM's grammar engine takes inside a
structural tag, so the tool's input is constrained while it is generated.

OpenAI's custom tools (Codex's freeform `apply_patch`) say what their one string input must be
as a Lark grammar or a regex. The gateway offers such a tool to the model as a function of one
string argument, `input`, and the model writes that argument in its own call syntax, so the
grammar is enforced where the string sits:

- inside a JSON string (Qwen3's `{"name": …, "arguments": {"input": "…"}}`, gpt-oss's
  `{"input": "…"}`): the language of the grammar's texts *as `json.dumps` spells them* — every
  `"` as `\\"`, `\\` as `\\\\`, a newline as `\\n`, other control characters as their escapes —
  which is how the gateway renders the call back (codex_tools.custom_arguments), so the
  constrained tokens stay what the next turn's prompt holds;
- raw (Qwen3.6's `<parameter=input>\\n…\\n</parameter>`): the grammar's own language.

The Lark grammar is read by Lark itself (rules, `%import`s, `?`/`*`/`+` expanded), its
terminals' regexes by Python's own regex parser, and each becomes xgrammar EBNF (the format
vLLM's `structural_tag` `grammar` elements take): rules as rules, a regex as the EBNF of the
same language. Lark matches a grammar's terminals by its lexer; the EBNF matches characters, a
superset for grammars whose terminals could be split differently — for Codex's apply_patch the
same language. What cannot be expressed (lookarounds, backreferences, `%ignore`, `%declare`,
case-insensitive regexes) raises `UnsupportedGrammar`: the tool is then offered unconstrained.
`\\w` and `\\d` are taken as ASCII.
"""

from __future__ import annotations

import functools
import json
import re
import re._constants as sre
import re._parser as sre_parse
from collections.abc import Iterable
from typing import Any

from gateway.core.conversation import ToolGrammar

__all__ = ["UnsupportedGrammar", "ebnf"]

MAX_CHAR = 0x10FFFF
_CATEGORIES = {
    sre.CATEGORY_DIGIT: [(0x30, 0x39)],
    sre.CATEGORY_SPACE: [(0x09, 0x0D), (0x20, 0x20)],
    sre.CATEGORY_WORD: [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
}
_CATEGORIES[sre.CATEGORY_NOT_DIGIT] = _CATEGORIES[sre.CATEGORY_DIGIT]
_CATEGORIES[sre.CATEGORY_NOT_SPACE] = _CATEGORIES[sre.CATEGORY_SPACE]
_CATEGORIES[sre.CATEGORY_NOT_WORD] = _CATEGORIES[sre.CATEGORY_WORD]
_NEGATED_CATEGORIES = {sre.CATEGORY_NOT_DIGIT, sre.CATEGORY_NOT_SPACE, sre.CATEGORY_NOT_WORD}
# What json.dumps escapes inside a string (ensure_ascii=False): the quote, the backslash, C0 controls.
_JSON_ESCAPED = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]

Ranges = list[tuple[int, int]]


class UnsupportedGrammar(ValueError):
    """The grammar uses what the EBNF cannot say (or is not a grammar): the tool goes unconstrained."""


@functools.lru_cache(maxsize=64)
def ebnf(grammar: ToolGrammar, *, json_string: bool) -> str:
    """The EBNF (root rule `root`) of `grammar`'s texts, spelled inside a JSON string when
    `json_string`. Cached: a client sends the same grammar with every request."""
    writer = _Writer(json_string)
    if grammar.syntax == "regex":
        return f"root ::= {writer.regex(grammar.definition, flags=frozenset())}"
    if grammar.syntax != "lark":
        raise UnsupportedGrammar(f"grammar syntax {grammar.syntax!r}")
    return writer.lark(grammar.definition)


class _Writer:
    def __init__(self, json_string: bool) -> None:
        self.json_string = json_string

    def lark(self, definition: str) -> str:
        # Lark's grammar compiler, not a Lark parser: its parsers refuse terminals that can match
        # nothing (apply_patch's `/(.*)/`), which a grammar engine takes as any other.
        from lark.exceptions import LarkError
        from lark.load_grammar import load_grammar

        try:
            terminals, compiled, ignored = load_grammar(definition, "<tool>", (), False)[0].compile(["start"], set())
        except LarkError as exc:
            raise UnsupportedGrammar(f"not a Lark grammar: {exc}") from exc
        if ignored:
            raise UnsupportedGrammar("%ignore")
        rules: dict[str, list[str]] = {}
        for rule in compiled:
            symbols = [("t_" if symbol.is_term else "r_") + symbol.name for symbol in rule.expansion]
            rules.setdefault("r_" + rule.origin.name, []).append(" ".join(symbols) or '""')
        if "r_start" not in rules:
            raise UnsupportedGrammar("no `start` rule")
        lines = ["root ::= r_start"]
        # Sorted: Lark's order follows set iteration, and the same grammar should be the same text
        # (vLLM caches compiled grammars by it).
        lines += [f"{name} ::= {' | '.join(sorted(rules[name]))}" for name in sorted(rules)]
        for terminal in sorted(terminals, key=lambda terminal: terminal.name):
            pattern = terminal.pattern
            if pattern.type == "str":
                body = self.text(pattern.value, fold="i" in pattern.flags)
            else:
                body = self.regex(pattern.value, flags=frozenset(pattern.flags))
            lines.append(f"t_{terminal.name} ::= {body}")
        return "\n".join(lines)

    def text(self, value: str, *, fold: bool = False) -> str:
        if not fold:
            return self._literal(value)
        parts = [self.chars(_cased(char)) for char in value]
        return "(" + " ".join(parts) + ")" if parts else '""'

    def regex(self, pattern: str, *, flags: frozenset[str]) -> str:
        if flags - {"s", "m"}:
            raise UnsupportedGrammar(f"regex flags {sorted(flags)}")
        try:
            parsed = sre_parse.parse(pattern, re.DOTALL if "s" in flags else 0)
        except re.error as exc:
            raise UnsupportedGrammar(f"not a regex: {exc}") from exc
        return self._sequence(list(parsed), dotall="s" in flags)

    def _sequence(self, nodes: list[tuple[Any, Any]], *, dotall: bool) -> str:
        parts: list[str] = []
        run: list[str] = []  # adjacent literals, written as one string
        for op, arg in nodes:
            if op is sre.LITERAL:
                run.append(chr(arg))
                continue
            if run:
                parts.append(self._literal("".join(run)))
                run = []
            parts.append(self._node(op, arg, dotall=dotall))
        if run:
            parts.append(self._literal("".join(run)))
        parts = [part for part in parts if part]
        return "(" + " ".join(parts) + ")" if parts else '""'

    def _node(self, op: Any, arg: Any, *, dotall: bool) -> str:
        if op is sre.NOT_LITERAL:
            return self.chars([(arg, arg)], negated=True)
        if op is sre.ANY:
            return self.chars([] if dotall else [(0x0A, 0x0A)], negated=True)
        if op is sre.IN:
            return self._class(arg)
        if op is sre.SUBPATTERN:
            return self._sequence(list(arg[-1]), dotall=dotall)
        if op is sre.BRANCH:
            return "(" + " | ".join(self._sequence(list(branch), dotall=dotall) for branch in arg[1]) + ")"
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            low, high, inner = arg
            return self._sequence(list(inner), dotall=dotall) + _repeat(low, None if high is sre.MAXREPEAT else high)
        if op is sre.AT and arg in (sre.AT_BEGINNING, sre.AT_BEGINNING_STRING, sre.AT_END, sre.AT_END_STRING):
            return ""  # a terminal matches whole anyway
        raise UnsupportedGrammar(f"regex construct {op}")

    def _class(self, items: Iterable[tuple[Any, Any]]) -> str:
        negated, ranges = False, []
        for op, arg in items:
            if op is sre.NEGATE:
                negated = True
            elif op is sre.LITERAL:
                ranges.append((arg, arg))
            elif op is sre.RANGE:
                ranges.append(arg)
            elif op is sre.CATEGORY and arg in _CATEGORIES:
                found = _CATEGORIES[arg]
                ranges += _complement(found) if arg in _NEGATED_CATEGORIES else found
            else:
                raise UnsupportedGrammar(f"character class item {op} {arg}")
        return self.chars(ranges, negated=negated)

    def chars(self, ranges: Ranges, *, negated: bool = False) -> str:
        """One character of `ranges` (or of all but them), as the spelling requires."""
        ranges = _merged(ranges)
        if not self.json_string:
            return _class(ranges, negated=negated)
        escaped = _merged(_JSON_ESCAPED)
        if negated:
            plain = _class(_merged(ranges + escaped), negated=True)
            specials = _subtract(escaped, ranges)
        else:
            plain = _class(_subtract(ranges, escaped), negated=False) if _subtract(ranges, escaped) else ""
            specials = _intersect(ranges, escaped)
        options = [plain] if plain else []
        options += [self._literal(chr(code)) for low, high in specials for code in range(low, high + 1)]
        if not options:
            raise UnsupportedGrammar("an empty character class")
        return options[0] if len(options) == 1 else "(" + " | ".join(options) + ")"

    def _literal(self, text: str) -> str:
        if self.json_string:
            text = json.dumps(text, ensure_ascii=False)[1:-1]
        return '"' + "".join(_escape(char, in_class=False) for char in text) + '"'


def _repeat(low: int, high: int | None) -> str:
    if (low, high) == (0, None):
        return "*"
    if (low, high) == (1, None):
        return "+"
    if (low, high) == (0, 1):
        return "?"
    return f"{{{low},}}" if high is None else f"{{{low},{high}}}"


def _cased(char: str) -> Ranges:
    return [(ord(c), ord(c)) for c in {char, char.lower(), char.upper()} if len(c) == 1]


def _class(ranges: Ranges, *, negated: bool) -> str:
    body = "".join(_escape(chr(low), in_class=True) + ("" if low == high else "-" + _escape(chr(high), in_class=True))
                   for low, high in ranges)
    return f"[{'^' if negated else ''}{body}]"


def _escape(char: str, *, in_class: bool) -> str:
    code = ord(char)
    if char in '"\\' or (in_class and char in "[]^-"):
        return "\\" + char
    if code < 0x20 or code == 0x7F or 0x80 <= code <= 0x9F or 0xD800 <= code <= 0xDFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}" if code > 0xFFFF else char


def _merged(ranges: Ranges) -> Ranges:
    out: Ranges = []
    for low, high in sorted(ranges):
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def _complement(ranges: Ranges) -> Ranges:
    out, start = [], 0
    for low, high in _merged(ranges):
        if low > start:
            out.append((start, low - 1))
        start = high + 1
    if start <= MAX_CHAR:
        out.append((start, MAX_CHAR))
    return out


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    return [(max(x0, y0), min(x1, y1)) for x0, x1 in a for y0, y1 in b if max(x0, y0) <= min(x1, y1)]


def _subtract(a: Ranges, b: Ranges) -> Ranges:
    return _intersect(_merged(a), _complement(b))
