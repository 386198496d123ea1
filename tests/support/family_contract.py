"""What every model family's parser and renderer are held to, as data each family's test modules
declare (`CONTRACT = OutputContract(...)`, `RENDER = RenderContract(...)`) and
tests/formats/test_family_contract.py checks for all of them: a model turn parses to the same
items however its ids are cut into feeds, a call whose ids split tags and multi-byte characters
parses at every cut, a call cut off keeps what was streamed, malformed markup degrades to text, arbitrary output never raises and never
depends on the feeds; the format reads the family's stop ids off its template; each of a family's own cases
(`Case`: an output and its items or exact events) parses as declared; and the prompt of any conversation is
the template's own render.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.conversation import Conversation, Message, Reasoning, Tool, ToolCall, ToolOutput
from gateway.formats.base import ParseEvent
from tests.support.parse_events import feed, items, marked_ids

Items = list[tuple[str, str | None, str]]

# The tools most families' contracts are declared against (a family whose cases type more kinds of
# value declares its own).
SHELL = Tool("shell", "Run a command.", {"type": "object", "properties": {
    "command": {"type": "array", "items": {"type": "string"}}, "workdir": {"type": "string"},
    "timeout_ms": {"type": "integer"}}})
READ = Tool("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})
TOOLS = [SHELL, READ]
# The shell tool's parameters, and those of more kinds (for the families that type values by the schema).
TYPED_PARAMETERS = {**SHELL.parameters["properties"], "ratio": {"type": "number"}, "login": {"type": "boolean"},
                    "env": {"type": "object"}}


def typed_shell(**more: dict[str, Any]) -> Tool:
    """The shell tool with `TYPED_PARAMETERS` and `more`."""
    return Tool("shell", "Run a command.", {"type": "object", "properties": {**TYPED_PARAMETERS, **more}})


# What arbitrary output of a family writing Qwen3's XML calls is made of, besides its markup.
XML_FRAGMENTS = ["<function=shell>", "<function=", "<parameter=workdir>", "<parameter=", "</parameter>", "</function>",
                 "\n", " ", ">", "<", "true", '{"a": 1}', "é", "東京", "x"]
# The calls of the contract's agent turn, as most families' parsers give them (after the turn's reasoning and text).
AGENT_CALLS: Items = [("tool_call", "shell", '{"command": ["pytest", "-q"], "workdir": "/srv/app", "timeout_ms": 60000}'),
                      ("tool_call", "read_file", '{"path": "pyproject.toml"}')]


@dataclass(frozen=True)
class Case:
    """One of a family's own outputs and what its parser makes of it: the items (fed whole and one id at
    a time) and, where given, the exact events fed one id at a time."""

    output: str
    items: Items
    events: Sequence[ParseEvent] | None = None
    tools: Sequence[Tool] | None = None  # the request's tools, where not the contract's
    about: str = ""  # what the case shows (its id in the suite)


@dataclass(frozen=True)
class OutputContract:
    family: str  # the family's name in the registry (gateway/formats/families.py)
    format: str  # the fixture holding the format whose parser is checked
    tokenizer: str  # the fixture holding its tokenizer
    markup: Mapping[str, int]  # marker text -> its added token id, for spelling output as ids
    tools: Sequence[Tool]  # the request's tools
    agent_turn: str  # a whole model turn (reasoning, text, parallel calls, its end) …
    agent_items: Items  # … and its items
    split_turn: str  # a call turn with multi-byte characters, fed in two at every cut …
    split_items: Items  # … and its items
    malformed: Sequence[tuple[str, Items]]  # (output after `prefix`, its items)
    fragments: Sequence[str]  # what arbitrary output is made of
    prefix: str = ""  # what the model writes before the malformed cases (e.g. closing its reasoning)
    # Output that stops inside a call's arguments (the length limit): the output, the call's name, the
    # arguments streamed by then, and the call's arguments once the parser finishes.
    cut_call: tuple[str, str, str, str] | None = None
    json_arguments: bool = False  # a call's streamed arguments are always one JSON object (typed values)
    fuzz_format: str | None = None  # another fixture's format for the arbitrary output (default: `format`)
    examples: int = 300  # arbitrary outputs tried
    seed: int = 13  # of the random feed sizes of the agent turn
    # What the format reads off the template: its stop ids (eos first), the ids that close a turn (default:
    # the stops) and those that open one (unchecked when None); a family with no stops here checks them itself.
    stops: Sequence[int] = ()
    terminators: Sequence[int] | None = None
    openers: Sequence[int] | None = None
    cases: Sequence[Case] = ()  # the family's own outputs
    # An output whose one call has a long multi-line "path" value, and the value: it streams in pieces.
    streamed: tuple[str, str] | None = None

    def __str__(self) -> str:
        return self.family

    def ids(self, tokenizer: Any, text: str, *, split: str = "canonical") -> list[int]:
        """`text` as ids: markers as their added tokens, the rest encoded canonically or (`bytes`) one
        byte-level token per byte, which splits every tag and multi-byte character across tokens."""
        return marked_ids(tokenizer, text, self.markup, split=split)

    def events(self, chat_format: Any, ids: Sequence[int], sizes: Sequence[int] | None = None,
               tools: Sequence[Tool] | None = None) -> list[ParseEvent]:
        return feed(chat_format.parser(self.tools if tools is None else tools), ids, sizes)

    def parse(self, chat_format: Any, ids: Sequence[int], sizes: Sequence[int] | None = None,
              tools: Sequence[Tool] | None = None) -> Items:
        return items(self.events(chat_format, ids, sizes, tools))


@dataclass(frozen=True)
class Injection:
    """Markup typed by a user, written into a call's argument and returned by a tool stays text: each is
    rendered as the text's plain encoding, the render's markup ids are those of the same conversation
    without it, and (`spelled`, `ends`) the family's render holds it where its template puts it."""

    text: str  # the family's markup, as text
    tools: Sequence[Tool]  # the request's tools (a "shell" among them)
    is_markup: Callable[[int], bool]  # an id no plain text encodes to
    after: Sequence[Any] = ()  # items after the tool output (where a family's template needs them)
    count: int = 3  # how often the decoded render spells `text`
    # Pieces (text, encoded without added tokens, or ids) the render holds in a row, and those it ends with;
    # `INJECTED` stands for the plain encoding of `text`.
    spelled: Sequence[Sequence[str | int]] = ()
    ends: Sequence[str | int] = ()


INJECTED = "{injected}"


@dataclass(frozen=True)
class Continuation:
    """The model generated `generated` (to its stop) after `first_turn(tools)`; the client sends the turn back
    followed by `then(turn)`: the next prompt, prepared by the session pipeline, is the first prompt, the
    model's own ids (all but its stop, where the next message replaces it) and then `rest` as the template
    writes it."""

    generated: Callable[[Any], list[int]]  # the tokenizer -> the model's ids
    then: Callable[[list[Any]], list[Any]]  # the turn's items -> what the client sends after them
    rest: str
    kinds: Sequence[type] | None = None  # the types of the turn's items, where checked
    prompt_ends: Sequence[int] = ()  # the first prompt's last ids (its generation prompt)
    replaced_stop: bool = False
    expect_tail: bool | None = None  # whether the format renders the new items alone (None: not checked)
    about: str = ""


def first_turn(tools: Sequence[Tool]) -> Conversation:
    """The conversation whose answer the continuation cases continue."""
    return Conversation(instructions="You are a coding agent.", tools=list(tools),
                        items=[Message("developer", "Be careful."), Message("user", "Run the tests.")])


@dataclass(frozen=True)
class RenderContract:
    family: str
    format: str  # the fixture holding the format whose render is checked
    tokenizer: str  # the fixture holding its tokenizer (and chat template)
    prepare: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None  # the family's message reshaping
    seed: int = 0  # of the random conversations
    # Conversations and the text the format renders for each, exactly or (`ELIDED` between pieces) beginning,
    # containing and ending as spelled: a reader sees the family's prompt.
    histories: Sequence[tuple[Conversation, str]] = ()
    injection: Injection | None = None
    continuations: Sequence[Continuation] = ()
    tools: Sequence[Tool] = ()  # the tools of `first_turn` for the continuations
    reported_call_ids: bool = False  # the turn's call ids are those the model wrote

    def __str__(self) -> str:
        return self.family


ELIDED = "[…]"  # in an expected render: any text

# An agent's history: instructions, developer messages before and after, reasoning, a call and its output.
AGENT_HISTORY = Conversation(
    instructions="You are a coding agent.", tools=[READ],
    items=[Message("developer", "Sandbox: read-only."), Message("user", "Show pyproject."), Reasoning("Read it."),
           ToolCall("c1", "read_file", '{"path": "pyproject.toml"}'), ToolOutput("c1", "[project]\nname = 'x'\n"),
           Message("developer", "Network is off.")])


def injected(conversation_text: str, injection: Injection) -> Conversation:
    """A user message, a call's argument and a tool's output spelling `conversation_text`."""
    return Conversation(tools=list(injection.tools), items=[
        Message("user", conversation_text),
        ToolCall("c", "shell", json.dumps({"workdir": conversation_text}, ensure_ascii=False)),
        ToolOutput("c", conversation_text), *injection.after])


def spelled_ids(tokenizer: Any, pieces: Sequence[str | int], text: str) -> list[int]:
    """`pieces` as ids: text encoded without added tokens (`INJECTED` replaced by `text`), ids as they are."""
    ids: list[int] = []
    for piece in pieces:
        ids += [piece] if isinstance(piece, int) else tokenizer._encode_without_added_tokens(
            piece.replace(INJECTED, text))
    return ids


def rendered_as(text: str, expected: str) -> bool:
    """Whether `text` is `expected`, its `ELIDED` parts standing for any text."""
    first, *pieces = expected.split(ELIDED)
    if not pieces:
        return text == expected
    if not text.startswith(first) or not text.endswith(pieces[-1]):
        return False
    position = len(first)
    for piece in pieces[:-1]:
        position = text.find(piece, position)
        if position < 0:
            return False
        position += len(piece)
    return position <= len(text) - len(pieces[-1])
