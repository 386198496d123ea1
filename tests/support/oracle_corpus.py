"""The corpus of model outputs every family is parsed with, by the gateway and by stock vLLM's own
parser (tests/formats/test_vllm_oracle.py, tests/support/vllm_oracle.py).

Each family declares how its model writes (a `Speaker`: its reasoning, one call, a group of calls,
the token ending its turn) and vLLM's parser names for it; the same cases are then spelled in every
family's markup: plain text, reasoning and text, one call, parallel calls, arguments of every JSON
type, text before a call, a call cut off by the length limit, and marker look-alikes (a family's
markup typed as text inside an argument and in the answer). Text between « and » is always encoded
as ordinary text, never as the marker it spells; everything else is encoded as
`parse_events.marked_ids` does (markers as their added ids). Each case is also fed with its
markup split into one token per byte (`bytes`), so markers written as text pieces split across
token boundaries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.core.conversation import Tool
from tests.support.parse_events import marked_ids

Args = dict[str, Any]

SHELL = Tool("shell", "Run a command.", {"type": "object", "properties": {
    "command": {"type": "array", "items": {"type": "string"}}, "workdir": {"type": "string"},
    "timeout_ms": {"type": "integer"}}})
READ = Tool("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})
TYPED = Tool("typed", "Every JSON type.", {"type": "object", "properties": {
    "s": {"type": "string"}, "i": {"type": "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"},
    "z": {"type": "null"}, "a": {"type": "array"}, "o": {"type": "object"}}})
TOOLS = (SHELL, READ, TYPED)
TYPED_ARGS: Args = {"s": "x y", "i": 42, "n": -1.5, "b": True, "z": None, "a": [1, "two", False],
                    "o": {"k": [True, None], "m": "東京"}}
_LITERAL = re.compile("«(.*?)»", re.DOTALL)


@dataclass(frozen=True)
class Speaker:
    """How one family's model writes, for spelling the corpus in its markup."""

    family: str  # the family's name in gateway/formats/families.py
    format: str  # the fixture holding its format
    tokenizer: str  # the fixture holding its tokenizer
    tool_parser: str  # vLLM's --tool-call-parser
    reasoning_parser: str | None  # vLLM's --reasoning-parser (None: none)
    markup: Mapping[str, int]  # marker text -> its added id
    call: Callable[[str, Args], str]  # one call (name, arguments) as the model writes it
    end: str  # the token ending a turn
    think: Callable[[str], str] | None = None  # reasoning as written after the generation prompt; None: none
    calls: Callable[[Sequence[str]], str] = "".join  # a group of calls (a section's wrapper)
    lookalike: str = ""  # markup typed as text (inside «»), for the look-alike cases
    # What the model writes before an answer it did not reason about (None: an empty `think`).
    quiet: str | None = None
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, str] = field(default_factory=dict)  # more cases of its own (e.g. its contract's)

    def __str__(self) -> str:
        return self.family

    def ids(self, tokenizer: Any, text: str, *, split: str = "canonical") -> list[int]:
        ids: list[int] = []
        for i, piece in enumerate(_LITERAL.split(text)):
            if i % 2:
                ids += tokenizer._encode_without_added_tokens(piece)
            elif piece:
                ids += marked_ids(tokenizer, piece, self.markup, split=split)
        return ids

    def cases(self) -> dict[str, str]:
        """The corpus in this family's markup: case name -> output text."""
        think = self.think or (lambda text: "")
        quiet = think("") if self.quiet is None else self.quiet
        one = self.calls([self.call("read_file", {"path": "src/東京.py"})])
        two = self.calls([self.call("shell", {"command": ["pytest", "-q"], "workdir": "/srv/app"}),
                          self.call("read_file", {"path": "pyproject.toml"})])
        typed = self.calls([self.call("typed", TYPED_ARGS)])
        looks = self.calls([self.call("read_file", {"path": f"a{self.lookalike}b"})])
        cases = {
            "text": quiet + "Hello, 東京 🗼. 1 < 2 > 0." + self.end,
            "reasoning-text": think("Plan: check é first.") + "Done: ✓." + self.end,
            "one-call": think("Read it.") + one + self.end,
            "parallel-calls": quiet + two + self.end,
            "typed-arguments": quiet + typed + self.end,
            "text-then-call": quiet + "Let me look.\n\n" + one + self.end,
            "cut-off-call": quiet + _cut(one),
            "lookalike-in-argument": quiet + looks + self.end,
            "lookalike-in-text": quiet + f"Use the a{self.lookalike}b form." + self.end,
        }
        if self.think is not None:  # an answer without the reasoning markup the model is expected to write
            cases["no-reasoning-markup"] = "Hello." + self.end
        return {**cases, **self.extra}


def _cut(call_text: str) -> str:
    """A call stopped by the length limit inside its argument value (`src/東` is written, `京.py` not)."""
    return call_text[:call_text.index("東") + 1]


def json_args(args: Args) -> str:
    return json.dumps(args, ensure_ascii=False)


def value_text(value: Any) -> str:
    """A parameter's value as XML-ish formats write it: strings raw, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
