"""The HF chat-template format: a model's own Jinja template in, its family's output parsed.

Prompts are rendered by the tokenizer's chat template (see `hf.render` for how content is
kept from becoming markup); output is parsed at the token level for reasoning and tool calls
as the model's family writes them: hermes JSON (`hermes`, Qwen2.5/Qwen3), Qwen's XML
(`qwen_xml`, Qwen3.5/3.6 and Qwen3-Coder), GLM's `<arg_key>`/`<arg_value>` (`glm`), the call
sections of DeepSeek-V3.1 (`deepseek`) and Kimi-K2 (`kimi`), Kimi-K3's XTML tags (`kimi_k3`), the `<invoke>` blocks of MiniMax-M2
(`minimax`) and DeepSeek-V3.2/V4 (`dsml`; these ship no template and render with DeepSeek's
encoder, `dsml.render`), Gemma 4's `<|tool_call>call:NAME{…}` (`gemma4`), Llama 3's JSON
(`llama3_json`). Each family is a declaration (`family.Family`) in its module; which one a model
gets is read off its template, config.json's `model_type` or vLLM's parser names, in the registry's
order (`families`). This class only assembles a format from the declarations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from tokenizers import decoders
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import bytes_to_unicode

from gateway.core.conversation import Conversation, Message, Tool
from gateway.core.errors import APIError
from gateway.core.image import Image
from gateway.core.sampling import OutputConstraint
from gateway.core.vision import PatchGrid, is_vision_model, load_grid
from gateway.formats import families
from gateway.formats._family import CHATML, Family, Parsing
from gateway.formats.base import Covered, LocalityProbe, Tail
from gateway.formats.hf import constraints
from gateway.formats.hf._window import TemplateWindow
from gateway.formats.hf.parser import HermesOutputParser, Markup
from gateway.formats.hf.render import SafeTemplateEncoder, hf_messages

__all__ = ["load_hf_format"]

_QWEN_MARKERS = {"think_open": "<think>", "think_close": "</think>", "call_open": "<tool_call>",
                 "call_close": "</tool_call>"}


class HFChatFormat:
    name = "hf"

    def __init__(self, tokenizer: PreTrainedTokenizerFast, *, enable_thinking: bool | None = None,
                 extra_eos_ids: Iterable[int] = (), tool_parser: str = "auto", reasoning_parser: str = "auto",
                 locality: LocalityProbe | None = None, vision: PatchGrid | bool = False) -> None:
        """`tool_parser` / `reasoning_parser` are vLLM's names (auto: read the template); `locality`
        decides which new items render alone (`render_tail`; gateway.tokenfix.locality), none without;
        `vision`: the model has a vision encoder (its patch grid, when images are counted by size)."""
        if not isinstance(tokenizer, PreTrainedTokenizerFast):
            raise TypeError(f"the hf format needs a fast (tokenizers) tokenizer, got {type(tokenizer).__name__}")
        reasoning_parsers = families.reasoning_parser_names()
        if reasoning_parser not in reasoning_parsers or reasoning_parser in families.OWN_FORMATS:
            raise ValueError(f"unknown reasoning parser {reasoning_parser!r}; expected one of "
                             f"{', '.join(r for r in reasoning_parsers if r not in families.OWN_FORMATS)}")
        self.tokenizer = tokenizer
        template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else ""
        # The family whose calls are parsed, and the template's own (its turns, preparation, reasoning markers).
        own = families.of_template(template)
        family = own if tool_parser == "auto" else families.by_tool_parser(tool_parser)
        self.family, self.tool_calls = family, family.name
        if tokenizer.chat_template is None and family.encoder is None:
            raise ValueError("the tokenizer has no chat template")
        turns_family = next((f for f in (family, own) if f.turns is not None), None)
        turns = turns_family.turns if turns_family is not None and turns_family.turns is not None else CHATML
        vocab = tokenizer.get_vocab()
        needs = [*family.needs, *(turns_family.needs if turns_family is not None else ())]
        missing = [t for t in dict.fromkeys(needs) if t not in vocab]
        if missing:
            raise ValueError(f"the {family.name} format needs the family's tokens; the tokenizer lacks "
                             f"{', '.join(missing)}")
        self._encoder, self._quiet_encoder = self._encoders(family, own, template, enable_thinking)
        self._enable_thinking = enable_thinking
        self._by_effort: dict[Any, SafeTemplateEncoder] = {}  # an own encoder's other effort levels, made on first use

        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        stops = [*eos, *(vocab[t] for t in turns.stops if t in vocab), *extra_eos_ids]
        self.stop_token_ids: list[int] = list(dict.fromkeys(stops))
        self.turn_terminators = frozenset(vocab[t] for t in turns.terminators if t in vocab) or frozenset(eos)
        self.turn_openers = frozenset(vocab[t] for t in turns.openers)

        self._token_bytes = _token_bytes(tokenizer)
        self.max_token_bytes = max(map(len, self._token_bytes))
        self._markup = _markup(vocab, family, own, reasoning=reasoning_parser != "none")
        self._parsers = family.parsers(vocab)
        image = own.image or family.image
        self.image_token_id: int | None = vocab.get(image) if vision and image is not None else None
        self._grid = vision if isinstance(vision, PatchGrid) else None
        opens_reasoning = family.opens_reasoning or own.opens_reasoning
        self._opens_reasoning = opens_reasoning if reasoning_parser != "none" else None
        self._starts_in_reasoning = self._prompt_opens_reasoning(thinking=True)
        self._quiet_starts_in_reasoning = self._prompt_opens_reasoning(thinking=False)
        if turns.stops_close_turns:
            self.turn_terminators |= self._stop_ids_closing_turns()
        self._window = self._template_window(locality)

    def _encoders(self, family: Family, own: Family, template: str,
                  enable_thinking: bool | None) -> tuple[SafeTemplateEncoder, SafeTemplateEncoder | None]:
        """The encoder, and the one of a request that turns thinking off (`Conversation.thinking`), rendered
        with the template's switch off as vLLM renders `chat_template_kwargs: {"enable_thinking": false}`
        (None: no switch). A family that ships no template renders with its own encoder (DeepSeek's DSML)."""
        if family.encoder is not None:
            quiet = family.encoder(self.tokenizer, False, None) if enable_thinking is not False else None
            return family.encoder(self.tokenizer, enable_thinking, None), quiet
        switch = own.thinking_switch  # the template's variable (Qwen3's, Qwen3.5/3.6's and GLM's enable_thinking)
        template_kwargs: dict[str, Any] = {}
        if enable_thinking is not None:
            template_kwargs[switch] = enable_thinking
        prepare = family.prepare or own.prepare
        encoder = SafeTemplateEncoder(self.tokenizer, template_kwargs, prepare=prepare)
        if enable_thinking is False or switch not in template:
            return encoder, None
        return encoder, SafeTemplateEncoder(self.tokenizer, {**template_kwargs, switch: False},
                                            prepare=prepare)

    def render(self, conversation: Conversation) -> list[int]:
        messages, tools = hf_messages(conversation)
        try:
            return self._encoder_for(conversation).encode(messages, tools)
        except TemplateError as exc:  # e.g. Qwen3.6's "No user query found in messages."
            raise APIError(f"The model's chat template cannot render this conversation: {exc.message}",
                           param="input", code="invalid_prompt") from exc

    def _encoder_for(self, conversation: Conversation) -> SafeTemplateEncoder:
        """The template's with thinking switched off when the request turns it off; a family's own
        encoder at the level the request's reasoning effort renders at (DeepSeek V4's preamble)."""
        if not conversation.thinking and self._quiet_encoder is not None:
            return self._quiet_encoder
        level = self.family.effort(conversation.reasoning_effort)
        if level is None or self.family.encoder is None:
            return self._encoder
        if level not in self._by_effort:
            self._by_effort[level] = self.family.encoder(self.tokenizer, self._enable_thinking, level)
        return self._by_effort[level]

    @property
    def incremental_kinds(self) -> frozenset[str]:
        """The kinds of new items this template renders on their own (`render_tail`)."""
        return self._window.kinds if self._window is not None else frozenset()

    def render_tail(self, conversation: Conversation, covered: Covered) -> Tail | None:
        if self._window is None or self._encoder_for(conversation) is not self._encoder:
            return None  # the window renders the template's default mode; the caller renders everything
        return self._window.tail(conversation, covered)

    def parser(self, tools: Sequence[Tool] = (), *, thinking: bool = True) -> HermesOutputParser:
        """A parser for one generation; `tools` (the request's) type the calls' arguments; `thinking`
        off starts it where the template's switched-off generation prompt leaves the model."""
        starts = self._starts_in_reasoning if thinking else self._quiet_starts_in_reasoning
        return self._parsers(Parsing(self._token_bytes, self._markup, frozenset(self.stop_token_ids)), starts, tools)

    def image_tokens(self, image: Image) -> int:
        if self._grid is None or image.width is None or image.height is None:
            return 1
        return self._grid.tokens(image.width, image.height)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def structured_outputs(self, constraint: OutputConstraint, tools: Sequence[Tool], *,
                           thinking: bool = True) -> dict[str, Any]:
        # Grammars exist for Qwen3's JSON and Qwen3.6's XML calls; any other family's calls would be
        # forced into markup its parser does not read, so forcing them is refused (a clear 400).
        starts = self._starts_in_reasoning if thinking else self._quiet_starts_in_reasoning
        return constraints.structured_outputs(constraint, tools, calls=self.family.grammar, markers=self._markup,
                                                 starts_in_reasoning=starts, thinking=thinking)

    def token_bytes(self, token_id: int) -> bytes:
        table = self._token_bytes
        found = table[token_id] if 0 <= token_id < len(table) else b""
        return found or (self.tokenizer.convert_ids_to_tokens(token_id) or "").encode()

    def _prompt_opens_reasoning(self, *, thinking: bool) -> bool:
        """Whether the generation prompt leaves a `<think>` open (the model starts mid-reasoning), or what
        the family says of the prompt's text."""
        think_open, think_close = self._markup.think_open, self._markup.think_close
        if think_open is None and self._opens_reasoning is None:
            return False
        ids = self.render(Conversation(items=[Message(role="user", text="Hi")], reasoning_effort=None if thinking else "none"))
        if self._opens_reasoning is not None:
            return self._opens_reasoning(self.decode(ids))
        last_open = max((i for i, t in enumerate(ids) if t == think_open), default=-1)
        last_close = max((i for i, t in enumerate(ids) if t == think_close), default=-1)
        return last_open > last_close

    def _stop_ids_closing_turns(self) -> frozenset[int]:
        """Every stop id the model may end its turn with (Qwen's `<|endoftext|>` next to
        `<|im_end|>`) closes the turn as the template's terminator does, so the next prompt
        continues after it instead of appending the template's. Only those the template never
        writes itself, so the terminators counted in a render stay the template's turns, and only
        added tokens (markup), which message text never produces."""
        probe = Conversation(items=[Message(role="user", text="a"), Message(role="assistant", text="b"),
                                    Message(role="user", text="c")])
        rendered = set(self.render(probe))
        markup = self.tokenizer.added_tokens_decoder
        return frozenset(t for t in self.stop_token_ids if t in markup and t not in rendered)

    def _template_window(self, locality: LocalityProbe | None) -> TemplateWindow | None:
        """Windowed renders find turns by their terminators' text: each must be markup that no
        other added token's text contains."""
        markup = [token.content for token in self.tokenizer.added_tokens_decoder.values()]
        strings = self.tokenizer.convert_ids_to_tokens(sorted(self.turn_terminators))
        if not all(s in markup and sum(s in m for m in markup) == 1 for s in strings):
            return None
        return TemplateWindow(self, self._encoder, strings, locality)


def _markup(vocab: dict[str, int], family: Family, own: Family, *, reasoning: bool) -> Markup:
    """The markers' ids and text: Qwen's, as the parsing family (or for reasoning, the template's) replaces
    them; with `reasoning` off no reasoning markers. Ids of markers the vocabulary lacks are None."""
    think = {k: v for k, v in own.markers.items() if k.startswith("think_")}
    markers = {**_QWEN_MARKERS, **think, **family.markers}
    if not reasoning:
        markers["think_open"] = markers["think_close"] = None
    named = {field: token for field, token in markers.items() if token is not None}
    ids = {field: vocab.get(named[field]) if field in named else None for field in _QWEN_MARKERS}
    text = {ids[f]: named[f].encode() for f in named if ids[f] is not None}
    text.update({vocab[t]: t.encode() for t in family.markup})  # more markup, which out of place is text
    return Markup(**ids, text=text)


def load_hf_format(tokenizer_path: str | Path, **options: Any) -> HFChatFormat:
    """An `HFChatFormat` from a tokenizer dir (or hub name); eos ids from generation_config.json too."""
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path))
    named = families.of_model_type(_model_type(tokenizer_path))
    if options.get("tool_parser", "auto") == "auto" and named is not None:
        options["tool_parser"] = named.tool_parsers[0]
    generation_config = Path(tokenizer_path) / "generation_config.json"
    if generation_config.is_file() and "extra_eos_ids" not in options:
        eos = json.loads(generation_config.read_text()).get("eos_token_id")
        options["extra_eos_ids"] = [eos] if isinstance(eos, int) else list(eos or [])
    if "vision" not in options and is_vision_model(tokenizer_path):
        options["vision"] = load_grid(tokenizer_path) or True
    return HFChatFormat(tokenizer, **options)


def _model_type(model_dir: str | Path) -> str | None:
    path = Path(model_dir) / "config.json"
    try:
        return json.loads(path.read_text()).get("model_type") if path.is_file() else None
    except (OSError, ValueError):
        return None


def _token_bytes(tokenizer: PreTrainedTokenizerFast) -> list[bytes]:
    """The bytes each id decodes to; special (control) tokens decode to nothing."""
    backend = tokenizer.backend_tokenizer
    if isinstance(backend.decoder, decoders.ByteLevel):
        to_latin1 = str.maketrans({char: chr(byte) for byte, char in bytes_to_unicode().items()})

        def piece_bytes(token: str) -> bytes:
            return token.translate(to_latin1).encode("latin-1")
    elif _sentencepiece_bpe(backend):
        piece_bytes = _sentencepiece_bytes
    else:
        raise ValueError(
            "the hf format streams byte-level BPE and SentencePiece-style BPE (byte fallback) tokenizers only; "
            f"this one decodes with {backend.decoder!r}"
        )
    vocab = backend.get_vocab(with_added_tokens=False)
    added = tokenizer.added_tokens_decoder
    table = [b""] * (max([*vocab.values(), *added]) + 1)
    for token, token_id in vocab.items():
        if token_id not in added:  # DeepSeek's BPE holds its added BOS/EOS/pad too, not byte-level
            table[token_id] = piece_bytes(token)
    for token_id, token in added.items():
        table[token_id] = b"" if token.special else token.content.encode()
    return table


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SENTENCEPIECE_DECODER = ["Replace", "ByteFallback", "Fuse"]


def _sentencepiece_bpe(backend: Any) -> bool:
    """A SentencePiece-style BPE (Gemma's, Llama 2's): `▁` for spaces, `<0xNN>` byte pieces, decoded by
    exactly Replace(`▁`, " "), ByteFallback, Fuse, so every id stands for fixed bytes."""
    decoder = json.loads(backend.to_str()).get("decoder") or {}
    steps = decoder.get("decoders", []) if decoder.get("type") == "Sequence" else [decoder]
    if [step.get("type") for step in steps] != _SENTENCEPIECE_DECODER:
        return False
    replace = steps[0]
    return replace.get("pattern") == {"String": "\u2581"} and replace.get("content") == " "


def _sentencepiece_bytes(token: str) -> bytes:
    byte = _BYTE_PIECE.fullmatch(token)
    return bytes([int(byte[1], 16)]) if byte else token.replace("\u2581", " ").encode()
