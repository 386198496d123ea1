"""The HF chat-template format: a model's own Jinja template in, Qwen-style output parsed.

Prompts are rendered by the tokenizer's chat template (see `hf_render` for how content is
kept from becoming markup); output is parsed at the token level for `<think>` reasoning and
`<tool_call>` blocks: hermes JSON (`hf_parser`, the Qwen2.5/Qwen3 family), Qwen's XML
(`qwen_xml`, Qwen3.5/3.6 and Qwen3-Coder), GLM's `<arg_key>`/`<arg_value>` (`glm`, GLM-4.5 to
GLM-5), the call sections of DeepSeek-V3.1 (`deepseek`) and Kimi-K2 (`kimi`), the `<invoke>` blocks
of MiniMax-M2 (`minimax`) and DeepSeek-V3.2/V4 (`dsml`; these two models ship no template, and render
with DeepSeek's encoder, `dsml_render`), or Gemma 4's `<|tool_call>call:NAME{…}` (`gemma4`, with
`<|channel>` reasoning). Which one is read off the template (a template that writes `<arg_key>` is
GLM's, one that writes `<｜tool▁calls▁begin｜>` DeepSeek's, `<|tool_calls_section_begin|>` Kimi's,
`<minimax:tool_call>` MiniMax's, `｜DSML｜` DSML, `<|tool_call>call:` Gemma 4's, `<function=` /
`<parameter=` XML) or off config.json's `model_type` (`deepseek_v32`, `deepseek_v4`), unless vLLM's
parser name is given.
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
from gateway.core.sampling import OutputConstraint
from gateway.formats import deepseek, dsml, gemma4, glm, hf_constraints, kimi, llama3_json, minimax
from gateway.formats.base import Covered, LocalityProbe, Tail
from gateway.formats.dsml_render import DSML, DsmlEncoder
from gateway.formats.hf_parser import HermesOutputParser, Markup
from gateway.formats.hf_render import SafeTemplateEncoder, hf_messages
from gateway.formats.hf_window import TemplateWindow
from gateway.formats.invoke import InvokeToolCallParser
from gateway.formats.qwen_xml import XmlToolCallParser, template_messages

# Tokens that end a turn in ChatML-style templates, besides the tokenizer's eos.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|endoftext|>")
# vLLM's --tool-call-parser / --reasoning-parser names this format speaks, and what they mean here.
TOOL_PARSERS = {"auto": "auto", "hermes": "hermes", "qwen3_coder": "xml", "qwen3_xml": "xml", "glm45": "glm",
                "glm47": "glm", "deepseek_v31": "deepseek", "kimi_k2": "kimi", "none": "none",
                "llama3_json": "llama3_json", "deepseek_v32": "dsml_v32", "deepseek_v4": "dsml_v4",
                "minimax_m2": "minimax", "gemma4": "gemma4"}
REASONING_PARSERS = {"auto": "think", "qwen3": "think", "glm45": "think", "glm47": "think", "deepseek_v3": "think",
                     "deepseek_r1": "think", "kimi_k2": "think", "none": "none",
                     "deepseek_v4": "think", "minimax_m2": "think", "gemma4": "think"}
# Families whose calls come in a section of calls, each a head and its arguments as written:
# (section begin, section end, (call begin, call end, head/arguments separator), parser)
SECTIONS = {
    "deepseek": (deepseek.CALLS_BEGIN, deepseek.CALLS_END, deepseek.CALL_TOKENS, deepseek.DeepSeekToolCallParser),
    "kimi": (kimi.CALLS_BEGIN, kimi.CALLS_END, kimi.CALL_TOKENS, kimi.KimiToolCallParser),
}
THINKING_SWITCH = "enable_thinking"  # the variable Qwen3, Qwen3.5/3.6 and GLM templates switch thinking with
XML_TEMPLATE_MARKERS = ("<function=", "<parameter=")
# Models DeepSeek ships without a chat template (config.json model_type): their encoder's calls.
DSML_MODEL_TYPES = {"deepseek_v32": "deepseek_v32", "deepseek_v4": "deepseek_v4"}


class HFChatFormat:
    name = "hf"

    def __init__(self, tokenizer: PreTrainedTokenizerFast, *, enable_thinking: bool | None = None,
                 extra_eos_ids: Iterable[int] = (), tool_parser: str = "auto", reasoning_parser: str = "auto",
                 locality: LocalityProbe | None = None) -> None:
        """`locality` decides which new items render alone (`render_tail`; gateway.tokenfix.locality), none
        without one."""
        if not isinstance(tokenizer, PreTrainedTokenizerFast):
            raise TypeError(f"the hf format needs a fast (tokenizers) tokenizer, got {type(tokenizer).__name__}")
        if tool_parser not in TOOL_PARSERS:
            raise ValueError(f"unknown tool parser {tool_parser!r}; expected one of {', '.join(TOOL_PARSERS)}")
        if reasoning_parser not in REASONING_PARSERS:
            raise ValueError(
                f"unknown reasoning parser {reasoning_parser!r}; expected one of {', '.join(REASONING_PARSERS)}"
            )
        self.tokenizer = tokenizer
        template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else ""
        self.tool_calls = TOOL_PARSERS[tool_parser]  # "hermes" | "xml" | "glm" | "deepseek" | "kimi" | "dsml_…" | "none"
        if self.tool_calls == "auto":
            self.tool_calls = _tool_calls_of(template)
        # DeepSeek-V3.2/V4 render with DeepSeek's encoder, not a template (gateway.formats.dsml_render).
        self._dsml = self.tool_calls.removeprefix("dsml_") if self.tool_calls.startswith("dsml_") else None
        if tokenizer.chat_template is None and self._dsml is None:
            raise ValueError("the tokenizer has no chat template")
        # GLM ends a turn on the token that opens the next message (see gateway.formats.glm).
        self._glm = glm.TEMPLATE_MARKER in template or self.tool_calls == "glm"
        template_kwargs: dict[str, Any] = {}
        if enable_thinking is not None:
            template_kwargs["enable_thinking"] = enable_thinking
        prepare = (template_messages if self.tool_calls in ("xml", "minimax")
                   else glm.template_messages if self._glm
                   else llama3_json.template_messages if self.tool_calls == "llama3_json"
                   else gemma4.template_messages if self.tool_calls == "gemma4" else None)
        self._encoder = (DsmlEncoder(tokenizer, self._dsml, enable_thinking) if self._dsml is not None
                         else SafeTemplateEncoder(tokenizer, template_kwargs, prepare=prepare))
        # A request that turns thinking off (`Conversation.thinking`) renders with the template's switch
        # off, as vLLM renders `chat_template_kwargs: {"enable_thinking": false}`; None: no switch.
        self._quiet_encoder: SafeTemplateEncoder | None = None
        if enable_thinking is not False and self._dsml is not None:
            self._quiet_encoder = DsmlEncoder(tokenizer, self._dsml, False)
        elif enable_thinking is not False and THINKING_SWITCH in template:
            self._quiet_encoder = SafeTemplateEncoder(tokenizer, {**template_kwargs, "enable_thinking": False},
                                                      prepare=prepare)

        vocab = tokenizer.get_vocab()
        missing = [t for t in (*glm.ARG_TOKENS, *glm.TURN_TOKENS) if t not in vocab] if self._glm else []
        if missing:
            raise ValueError(f"GLM's format needs GLM's tokens; the tokenizer lacks {', '.join(missing)}")
        section = SECTIONS.get(self.tool_calls)
        missing = [t for t in (*section[:2], *section[2]) if t not in vocab] if section else []
        if self._dsml is not None and DSML not in vocab:
            missing = [DSML]
        if self.tool_calls == "minimax":
            missing = [t for t in (minimax.CALLS_BEGIN, minimax.CALLS_END) if t not in vocab]
        if missing:
            raise ValueError(f"{self.tool_calls} tool calls need the family's tokens; the tokenizer lacks "
                             f"{', '.join(missing)}")
        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        turn_ends = glm.STOP_TOKENS if self._glm else END_OF_TURN_TOKENS
        if self.tool_calls == "gemma4":
            turn_ends = gemma4.STOP_TOKENS
        stops = [*eos, *(vocab[t] for t in turn_ends if t in vocab), *extra_eos_ids]
        self.stop_token_ids: list[int] = list(dict.fromkeys(stops))
        if self._glm:
            self.turn_terminators = frozenset(vocab[t] for t in glm.TURN_TOKENS)
        else:
            self.turn_terminators = frozenset({vocab["<|im_end|>"]} if "<|im_end|>" in vocab else eos)
        self.turn_openers = self.turn_terminators if self._glm else frozenset()
        if self.tool_calls == "gemma4":  # `<|tool_response>` ends a model turn by opening its results
            self.turn_terminators = frozenset(vocab[t] for t in gemma4.TURN_TOKENS)
            self.turn_openers = frozenset(vocab[t] for t in gemma4.OPENER_TOKENS)

        self._token_bytes = _token_bytes(tokenizer)
        self.max_token_bytes = max(map(len, self._token_bytes))
        markers = {"think_open": "<think>", "think_close": "</think>",
                   "call_open": "<tool_call>", "call_close": "</tool_call>"}
        if section:
            markers.update(call_open=section[0], call_close=section[1])
        if self.tool_calls == "minimax":
            markers.update(call_open=minimax.CALLS_BEGIN, call_close=minimax.CALLS_END)
        if self._dsml is not None:  # `｜DSML｜` opens every tag; the parser reads the text around it
            markers["call_open"] = DSML
            del markers["call_close"]
        if self.tool_calls == "gemma4":
            markers.update(think_open=gemma4.CHANNEL_OPEN, think_close=gemma4.CHANNEL_CLOSE,
                           call_open=gemma4.CALL_OPEN, call_close=gemma4.CALL_CLOSE)
        if REASONING_PARSERS[reasoning_parser] == "none":
            del markers["think_open"], markers["think_close"]
        if self.tool_calls == "none":
            del markers["call_open"], markers["call_close"]
        if self.tool_calls == "llama3_json":  # calls have no closing marker; `<|python_tag|>` may open them
            markers.update(call_open=llama3_json.PYTHON_TAG)
            del markers["call_close"]
        ids = {field: vocab.get(token) for field, token in markers.items()}
        ids = {field: ids.get(field) for field in ("think_open", "think_close", "call_open", "call_close")}
        text = {ids[f]: markers[f].encode() for f in markers if ids[f] is not None}
        if self.tool_calls == "glm":  # GLM's argument tags are markup too: out of a call, text
            self._arg_ids = tuple(vocab[t] for t in glm.ARG_TOKENS)
            text.update({vocab[t]: t.encode() for t in glm.ARG_TOKENS})
        if section:  # likewise the per-call markers of a section
            self._call_ids = tuple(vocab[t] for t in section[2])
            text.update({vocab[t]: t.encode() for t in section[2]})
        if self.tool_calls == "gemma4":  # `<|"|>` delimits strings in a call; out of one, text
            text[vocab[gemma4.STRING]] = gemma4.STRING.encode()
        self._markup = Markup(**ids, text=text)
        if self._dsml is not None:
            self._invoke_tags = dsml.tags(vocab[DSML], self._dsml)
        elif self.tool_calls == "minimax":
            self._invoke_tags = minimax.tags(vocab[minimax.CALLS_BEGIN], vocab[minimax.CALLS_END])
        self._starts_in_reasoning = self._prompt_opens_reasoning(thinking=True)
        self._quiet_starts_in_reasoning = self._prompt_opens_reasoning(thinking=False)
        if not self._glm:
            self.turn_terminators |= self._stop_ids_closing_turns()
        self._window = self._template_window(locality)

    def render(self, conversation: Conversation) -> list[int]:
        messages, tools = hf_messages(conversation)
        try:
            return self._encoder_for(conversation.thinking).encode(messages, tools)
        except TemplateError as exc:  # e.g. Qwen3.6's "No user query found in messages."
            raise APIError(f"The model's chat template cannot render this conversation: {exc.message}",
                           param="input", code="invalid_prompt") from exc

    def _encoder_for(self, thinking: bool) -> SafeTemplateEncoder:
        return self._quiet_encoder if not thinking and self._quiet_encoder is not None else self._encoder

    @property
    def incremental_kinds(self) -> frozenset[str]:
        """The kinds of new items this template renders on their own (`render_tail`)."""
        return self._window.kinds if self._window is not None else frozenset()

    def render_tail(self, conversation: Conversation, covered: Covered) -> Tail | None:
        if self._window is None or self._encoder_for(conversation.thinking) is not self._encoder:
            return None  # the window renders the template's default mode; the caller renders everything
        return self._window.tail(conversation, covered)

    def parser(self, tools: Sequence[Tool] = (), *, thinking: bool = True) -> HermesOutputParser:
        """A parser for one generation; `tools` (the request's) type XML calls' parameters; `thinking`
        off starts it where the template's switched-off generation prompt leaves the model."""
        stop_ids = frozenset(self.stop_token_ids)
        starts = self._starts_in_reasoning if thinking else self._quiet_starts_in_reasoning
        if self.tool_calls == "xml":
            return XmlToolCallParser(self._token_bytes, self._markup, stop_ids, starts, tools)
        if self.tool_calls == "glm":
            return glm.GlmToolCallParser(self._token_bytes, self._markup, self._arg_ids, stop_ids,
                                         starts, tools)
        if self.tool_calls == "gemma4":
            return gemma4.Gemma4Parser(self._token_bytes, self._markup, self.tokenizer.convert_tokens_to_ids(
                gemma4.STRING), stop_ids, starts, tools)
        if self.tool_calls == "llama3_json":
            return llama3_json.Llama3JsonParser(self._token_bytes, self._markup, stop_ids, tools)
        if self.tool_calls == "minimax":
            return minimax.MiniMaxToolCallParser(self._token_bytes, self._markup, self._invoke_tags, stop_ids,
                                                 starts, tools)
        if self._dsml is not None:
            return InvokeToolCallParser(self._token_bytes, self._markup, self._invoke_tags, stop_ids, starts, tools)
        if self.tool_calls in SECTIONS:
            return SECTIONS[self.tool_calls][3](self._token_bytes, self._markup, self._call_ids, stop_ids,
                                                starts, tools)
        return HermesOutputParser(self._token_bytes, self._markup, stop_ids, starts)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def structured_outputs(self, constraint: OutputConstraint, tools: Sequence[Tool]) -> dict[str, Any]:
        # Grammars exist for Qwen3's JSON and Qwen3.6's XML calls; any other family's calls would be
        # forced into markup its parser does not read, so forcing them is refused (a clear 400).
        calls = self.tool_calls if self.tool_calls in ("hermes", "xml") else "none"
        return hf_constraints.structured_outputs(constraint, tools, calls=calls, markers=self._markup,
                                                 starts_in_reasoning=self._starts_in_reasoning)

    def token_bytes(self, token_id: int) -> bytes:
        table = self._token_bytes
        found = table[token_id] if 0 <= token_id < len(table) else b""
        return found or (self.tokenizer.convert_ids_to_tokens(token_id) or "").encode()

    def _prompt_opens_reasoning(self, *, thinking: bool) -> bool:
        """Whether the generation prompt leaves a `<think>` open (the model starts mid-reasoning)."""
        think_open, think_close = self._markup.think_open, self._markup.think_close
        if think_open is None:
            return False
        ids = self.render(Conversation(items=[Message(role="user", text="Hi")], reasoning_effort=None if thinking else "none"))
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


def _tool_calls_of(template: str) -> str:
    if minimax.TEMPLATE_MARKER in template:
        return "minimax"
    if DSML in template:
        return "dsml_v4" if f"{DSML}tool_calls" in template else "dsml_v32"
    if gemma4.TEMPLATE_MARKER in template:
        return "gemma4"
    if glm.TEMPLATE_MARKER in template:
        return "glm"
    if deepseek.TEMPLATE_MARKER in template:
        return "deepseek"
    if kimi.TEMPLATE_MARKER in template:
        return "kimi"
    if llama3_json.TEMPLATE_MARKER in template and "<|eot_id|>" in template:
        return "llama3_json"
    return "xml" if any(marker in template for marker in XML_TEMPLATE_MARKERS) else "hermes"


def load_hf_format(tokenizer_path: str | Path, **options: Any) -> HFChatFormat:
    """An `HFChatFormat` from a tokenizer dir (or hub name); eos ids from generation_config.json too."""
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path))
    if options.get("tool_parser", "auto") == "auto" and _model_type(tokenizer_path) in DSML_MODEL_TYPES:
        options["tool_parser"] = DSML_MODEL_TYPES[_model_type(tokenizer_path)]
    generation_config = Path(tokenizer_path) / "generation_config.json"
    if generation_config.is_file() and "extra_eos_ids" not in options:
        eos = json.loads(generation_config.read_text()).get("eos_token_id")
        options["extra_eos_ids"] = [eos] if isinstance(eos, int) else list(eos or [])
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
