"""The Mistral format (Mistral Small, Devstral, Magistral): prompts by Mistral's own encoder.

Mistral publishes no chat template it stands behind: `mistral-common`'s request encoder is the
reference (vLLM's `--tokenizer-mode mistral` renders with it too), so the gateway renders with it
rather than imitating it. A `Conversation` becomes mistral-common's request records and
`encode_chat_completion` makes the ids; content is encoded by tekken's BPE, which has no control
tokens in it, so text a user types or a tool returns (`[INST]`, `[TOOL_CALLS]`) stays text.

Mistral's rules for the records, applied here so any conversation renders:
- call ids are nine alphanumeric characters; another id (the gateway's `call_…`) is rendered as a
  fixed nine-character digest of itself, so the same call always renders the same ids;
- system and developer text are system messages, except after an assistant turn or a tool result,
  where Mistral's order has no place for one: there it is a user message (as Qwen3.6's template
  makes a late developer message a user query); an assistant turn's reasoning is a `ThinkChunk`
  where the tokenizer has `[THINK]` (v13 Magistral), and is not rendered where it has not;
- an empty answer (the model wrote nothing visible) renders as its `</s>` alone, which the encoder
  would refuse to make: a placeholder is encoded and taken out again;
- the validator runs in mistral-common's `agnostic` mode, which checks the message order but
  not the last role, so a history that ends with the model's turn renders too (`tokenfix` asks).

Output is parsed by `mistral.parser`. A turn ends with `</s>`, the only terminator; nothing opens
the model's turn (`[/INST]` or `[/TOOL_RESULTS]` ends the prompt), so the exact-token splice needs
no more than that.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import xxhash
from mistral_common.exceptions import MistralCommonException
from mistral_common.protocol.instruct.chunk import TextChunk, ThinkChunk
from mistral_common.protocol.instruct.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from mistral_common.protocol.instruct.request import ChatCompletionRequest
from mistral_common.protocol.instruct.tool_calls import Function, FunctionCall
from mistral_common.protocol.instruct.tool_calls import Tool as MistralTool
from mistral_common.protocol.instruct.tool_calls import ToolCall as MistralToolCall
from mistral_common.protocol.instruct.validator import ValidationMode
from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy, SpecialTokens, TokenizerVersion
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
from mistral_common.tokens.tokenizers.tekken import Tekkenizer
from pydantic import ValidationError

from gateway.core.conversation import Conversation, Message, Reasoning, Tool, ToolCall, ToolOutput
from gateway.core.errors import APIError
from gateway.core.image import Image
from gateway.core.sampling import OutputConstraint
from gateway.formats.base import Covered, Tail
from gateway.formats.hf.parser import Markup
from gateway.formats.mistral._parser import CALL_ID_SHAPE, MistralToolCallParser

__all__ = ["is_mistral_dir", "load_mistral_format"]

TOKENIZER_FILE = "tekken.json"
# Stands in for an empty answer (a generation with no visible output), which mistral-common refuses to
# encode; taken out of the ids again, leaving what the encoder would write for it: `</s>`.
_EMPTY = "\U0010fffd"
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


class MistralFormat:
    name = "mistral"
    image_token_id: int | None = None  # text only

    def image_tokens(self, image: Image) -> int:
        return 1

    def __init__(self, tokenizer: MistralTokenizer) -> None:
        tekken = tokenizer.instruct_tokenizer.tokenizer
        if not isinstance(tekken, Tekkenizer):
            raise TypeError(f"the mistral format needs a tekken tokenizer, got {type(tekken).__name__}")
        self.tokenizer = tokenizer
        self._tekken = tekken
        self.version = tekken.version
        self._thinks = _has(tekken, SpecialTokens.begin_think) and _has(tekken, SpecialTokens.end_think)
        eos = tekken.eos_id
        self.stop_token_ids: list[int] = [eos]
        self.turn_terminators = frozenset({eos})
        self.turn_openers: frozenset[int] = frozenset()
        self._token_bytes = [tekken.id_to_byte_piece(i, SpecialTokenPolicy.IGNORE) for i in range(tekken.n_words)]
        self.max_token_bytes = max(map(len, self._token_bytes))
        markers = {SpecialTokens.tool_calls: "call_open"}
        if self._thinks:
            markers.update({SpecialTokens.begin_think: "think_open", SpecialTokens.end_think: "think_close"})
        new_calls = self.version >= TokenizerVersion.v11
        extra = [SpecialTokens.args, SpecialTokens.call_id] if new_calls else []
        ids = {field: tekken.get_special_token(token.value) for token, field in markers.items()}
        text = {tekken.get_special_token(t.value): t.value.encode() for t in [*markers, *extra]}
        self._markup = Markup(think_open=ids.get("think_open"), think_close=ids.get("think_close"),
                              call_open=ids["call_open"], call_close=None, text=text)
        self._empty_ids = tekken.encode(_EMPTY, bos=False, eos=False)
        self._args = tekken.get_special_token(SpecialTokens.args.value) if new_calls else None
        self._call_id = tekken.get_special_token(SpecialTokens.call_id.value) if new_calls else None

    def render(self, conversation: Conversation) -> list[int]:
        try:
            messages, empty = self._messages(conversation)
            request = ChatCompletionRequest(messages=messages, tools=[_tool(t) for t in conversation.tools] or None)
            ids = list(self.tokenizer.encode_chat_completion(request).tokens)
            return self._without_placeholders(ids, empty) if empty else ids
        except (MistralCommonException, ValidationError, AssertionError, ValueError) as exc:
            raise APIError(f"This conversation cannot be rendered for a Mistral model: {exc}", status=400,
                           param="input", code="invalid_conversation") from exc

    def render_tail(self, conversation: Conversation, covered: Covered) -> Tail | None:
        return None  # the encoder renders whole requests; the caller renders everything

    def parser(self, tools: Sequence[Tool] = (), *, thinking: bool = True) -> MistralToolCallParser:
        return MistralToolCallParser(self._token_bytes, self._markup, self._args, self._call_id,
                                     frozenset(self.stop_token_ids), tools)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self._tekken.decode(list(token_ids), special_token_policy=SpecialTokenPolicy.KEEP)

    def token_bytes(self, token_id: int) -> bytes:
        if 0 <= token_id < self._tekken.num_special_tokens:
            return self._tekken.id_to_byte_piece(token_id, SpecialTokenPolicy.KEEP)
        table = self._token_bytes
        return table[token_id] if 0 <= token_id < len(table) else b""

    def structured_outputs(self, constraint: OutputConstraint, tools: Sequence[Tool], *,
                           thinking: bool = True) -> dict[str, Any]:
        if not constraint.active:
            return {}
        raise APIError("Forced tool calls, allowed_tools, parallel_tool_calls: false and JSON output formats "
                       "are not supported for Mistral models by this gateway yet.", status=400,
                       param="tool_choice", code="unsupported_value")

    def _without_placeholders(self, ids: list[int], empty: list[int]) -> list[int]:
        """`ids` with the placeholder of each empty answer (the `n`-th run of assistant messages for `n`
        in `empty`) taken out: each run ends with the render's `n`-th `</s>`, and content makes none."""
        eos = self.stop_token_ids[0]
        ends = [i for i, token in enumerate(ids) if token == eos]
        width = len(self._empty_ids)
        for n in reversed(empty):
            end = ends[n] if n < len(ends) else -1
            if end < width or ids[end - width:end] != self._empty_ids:
                raise AssertionError("an empty answer's placeholder is not where the encoder puts it")
            del ids[end - width:end]
        return ids

    # Conversation -> mistral-common's records ----------------------------------------------------

    def _messages(self, conversation: Conversation) -> tuple[list[Any], list[int]]:
        """mistral-common's messages, and which of the assistant messages are empty answers."""
        messages: list[Any] = []
        if conversation.instructions:
            messages.append(SystemMessage(content=conversation.instructions))
        turn: dict[str, Any] | None = None  # the model turn being gathered: think, text, calls
        for item in conversation.items:
            if isinstance(item, Reasoning | ToolCall) or (isinstance(item, Message) and item.role == "assistant"):
                if turn is None or _starts_turn(item, turn):
                    turn = {"think": None, "text": None, "calls": []}
                    messages.append(turn)
                if isinstance(item, Reasoning):
                    turn["think"] = item.text
                elif isinstance(item, Message):
                    turn["text"] = item.text
                else:
                    function = FunctionCall(name=item.name, arguments=item.arguments)
                    turn["calls"].append(MistralToolCall(id=mistral_call_id(item.call_id), function=function))
                continue
            turn = None
            if isinstance(item, ToolOutput):
                messages.append(ToolMessage(content=item.output, tool_call_id=mistral_call_id(item.call_id),
                                            name=item.name))
            elif item.role == "user":
                messages.append(UserMessage(content=item.text))
            elif messages and isinstance(messages[-1], dict | ToolMessage):
                messages.append(UserMessage(content=item.text))  # Mistral takes no system text after the model's
            else:
                messages.append(SystemMessage(content=item.text))
        # The encoder joins neighbouring assistant messages into one answer (one `</s>`). Empty turns add
        # nothing to a run that has content; a run of nothing but empty turns is one placeholder answer.
        records: list[Any] = []
        empty: list[int] = []
        runs = 0
        for is_turn, group in itertools.groupby(messages, key=lambda m: isinstance(m, dict)):
            if not is_turn:
                records += group
                continue
            run = list(group)
            full = [turn for turn in run if self._has_content(turn)]
            if not full:
                empty.append(runs)
            records += [self._assistant(turn) for turn in full or run[:1]]
            runs += 1
        return records, empty

    def _has_content(self, turn: dict[str, Any]) -> bool:
        return bool(turn["text"] or turn["calls"] or (turn["think"] is not None and self._thinks))

    def _assistant(self, turn: dict[str, Any]) -> AssistantMessage:
        chunks: list[Any] = []
        if turn["think"] is not None and self._thinks:
            chunks.append(ThinkChunk(thinking=turn["think"], closed=True))
        if turn["text"]:
            chunks.append(TextChunk(text=turn["text"]))
        content: Any = chunks if any(isinstance(c, ThinkChunk) for c in chunks) else (turn["text"] or None)
        if not self._has_content(turn):
            content = _EMPTY  # the encoder refuses an empty answer; `render` takes the placeholder out
        return AssistantMessage(content=content, tool_calls=turn["calls"] or None)


def _starts_turn(item: Reasoning | Message | ToolCall, turn: dict[str, Any]) -> bool:
    """Whether `item` opens a new assistant message after `turn` (one model turn is reasoning,
    then text, then calls; anything out of that order starts the next)."""
    if isinstance(item, ToolCall):
        return False
    if isinstance(item, Reasoning):
        return turn["think"] is not None or turn["text"] is not None or bool(turn["calls"])
    return turn["text"] is not None or bool(turn["calls"])


def mistral_call_id(call_id: str) -> str:
    """`call_id` if it has Mistral's shape (nine alphanumerics), else a fixed digest of it that has."""
    if CALL_ID_SHAPE.fullmatch(call_id):
        return call_id
    number = xxhash.xxh3_64_intdigest(call_id.encode())
    digits = []
    for _ in range(9):
        number, digit = divmod(number, len(_ALPHABET))
        digits.append(_ALPHABET[digit])
    return "".join(digits)


def _tool(tool: Tool) -> MistralTool:
    return MistralTool(function=Function(name=tool.name, description=tool.description, parameters=tool.parameters))


def _has(tekken: Tekkenizer, token: SpecialTokens) -> bool:
    try:
        tekken.get_special_token(token.value)
    except ValueError:
        return False
    return True


def is_mistral_dir(path: str | Path) -> bool:
    return (Path(path) / TOKENIZER_FILE).is_file()


def load_mistral_format(tokenizer_path: str | Path) -> MistralFormat:
    """The format of a model dir holding Mistral's `tekken.json` (or the path of such a file)."""
    path = Path(tokenizer_path)
    file = path / TOKENIZER_FILE if path.is_dir() else path
    if not file.is_file():
        raise ValueError(f"the mistral format renders with Mistral's tokenizer file: {file} does not exist "
                         f"(use --chat-format hf for a model without tekken.json)")
    return MistralFormat(MistralTokenizer.from_file(str(file), mode=ValidationMode.agnostic))
