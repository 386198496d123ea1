"""What a chat-template family is, as data: the shape every family module declares.

A family is what a model writes and how its template reads: the markers of its reasoning and
tool calls, the tokens that end and open its turns, how messages are reshaped for its template,
the parser of its output, and how its template (or config.json) gives it away. `HFChatFormat`
builds a format from two of them: the family whose tool calls it parses (vLLM's
`--tool-call-parser`, or the template's), and the template's own family, which supplies the turn
structure, message preparation and reasoning markers the parsing family does not declare (GLM's
turn tokens hold with `--tool-call-parser none`). gateway/formats/families.py lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.core.conversation import Tool
from gateway.formats.hf.parser import HermesOutputParser, Markup

__all__ = ["CHATML", "Family", "ParserFactory", "Parsing", "Turns"]

Messages = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Parsing:
    """What every parser of one format shares: the byte table, the markers' ids, the stop ids."""

    token_bytes: list[bytes]
    markup: Markup
    stop_ids: frozenset[int]


# (shared, whether the model starts mid-reasoning, the request's tools) -> a parser for one generation
ParserFactory = Callable[[Parsing, bool, Sequence[Tool]], HermesOutputParser]


def hermes_parsers(vocab: Mapping[str, int]) -> ParserFactory:
    """Qwen's `<think>` and hermes `<tool_call>` JSON: the parser every family builds on."""
    return lambda shared, starts, tools: HermesOutputParser(shared.token_bytes, shared.markup, shared.stop_ids,
                                                            starts)


def never(template: str) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Turns:
    """How a template ends a model turn (token texts, looked up in the vocabulary)."""

    stops: tuple[str, ...]  # what the model stops on, besides eos and generation_config's
    terminators: tuple[str, ...] = ()  # what ends a turn in a render (the splice counts them); () : eos
    openers: tuple[str, ...] = ()  # of those, the ones that open the next message
    stops_close_turns: bool = True  # another stop id the template never writes also ends a turn


# ChatML's, for a family that declares none: `<|im_end|>` (or eos) ends a turn.
CHATML = Turns(stops=("<|im_end|>", "<|endoftext|>"), terminators=("<|im_end|>",))


@dataclass(frozen=True, slots=True)
class Family:
    """One model family's declaration (see the module docstring)."""

    name: str  # what the format calls its tool calls (`HFChatFormat.tool_calls`)
    tool_parsers: tuple[str, ...] = ()  # vLLM's --tool-call-parser names that pick it
    reasoning_parsers: tuple[str, ...] = ()  # vLLM's --reasoning-parser names for its reasoning
    detect: Callable[[str], bool] = never  # whether a chat template is this family's
    model_types: tuple[str, ...] = ()  # config.json model_types that pick it (models shipped without a template)
    # think_open / think_close / call_open / call_close token texts replacing Qwen's; None: the family has none
    markers: Mapping[str, str | None] = field(default_factory=dict)
    markup: tuple[str, ...] = ()  # more added tokens a call reads, which out of a call are text
    needs: tuple[str, ...] = ()  # tokens the vocabulary must hold for this family
    turns: Turns | None = None  # None: the template family's, else ChatML's
    prepare: Callable[[Messages], Messages] | None = None  # reshaping `hf_messages` for the template
    parsers: Callable[[Mapping[str, int]], ParserFactory] = hermes_parsers  # the vocabulary -> its parser factory
    # renders without a chat template: (tokenizer, enable_thinking, effort level) -> a SafeTemplateEncoder;
    # None: the template does
    encoder: Callable[[Any, bool | None, Any], Any] | None = None
    # a request's reasoning effort -> the level its encoder renders (None: the default level), as vLLM maps it
    effort: Callable[[str | None], Any] = lambda effort: None
    # the template's variable switching thinking (vLLM's `chat_template_kwargs`), as Qwen3's is named
    thinking_switch: str = "enable_thinking"
    # whether a generation prompt (its text) leaves the model reasoning; None: a `think_open` id after the last
    # `think_close` (families whose reasoning opens with a tag of several tokens say how)
    opens_reasoning: Callable[[str], bool] | None = None
    image: str | None = None  # the token its template writes once per image (vLLM expands it); None: no images
    grammar: str = "none"  # the calls a structured-output grammar can force (gateway.formats.hf.constraints)
