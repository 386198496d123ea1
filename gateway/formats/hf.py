"""The HF chat-template format: a model's own Jinja template in, Qwen3-style output parsed.

Prompts are rendered by the tokenizer's chat template (see `hf_render` for how content is
kept from becoming markup); output is parsed at the token level for `<think>` reasoning and
hermes `<tool_call>` blocks (see `hf_parser`), which covers the Qwen2.5/Qwen3 family.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tokenizers import decoders
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import bytes_to_unicode

from gateway.core.conversation import Conversation, Message
from gateway.formats.base import Covered, Tail
from gateway.formats.hf_parser import HermesOutputParser, Markup
from gateway.formats.hf_render import SafeTemplateEncoder, hf_messages
from gateway.formats.hf_window import TemplateWindow

# Tokens that end a turn in ChatML-style templates, besides the tokenizer's eos.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|endoftext|>")


class HFChatFormat:
    name = "hf"

    def __init__(self, tokenizer: PreTrainedTokenizerFast, *, enable_thinking: bool | None = None,
                 extra_eos_ids: Iterable[int] = ()) -> None:
        if not isinstance(tokenizer, PreTrainedTokenizerFast):
            raise TypeError(f"the hf format needs a fast (tokenizers) tokenizer, got {type(tokenizer).__name__}")
        if tokenizer.chat_template is None:
            raise ValueError("the tokenizer has no chat template")
        self.tokenizer = tokenizer
        template_kwargs: dict[str, Any] = {}
        if enable_thinking is not None:
            template_kwargs["enable_thinking"] = enable_thinking
        self._encoder = SafeTemplateEncoder(tokenizer, template_kwargs)

        vocab = tokenizer.get_vocab()
        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        stops = [*eos, *(vocab[t] for t in END_OF_TURN_TOKENS if t in vocab), *extra_eos_ids]
        self.stop_token_ids: list[int] = list(dict.fromkeys(stops))
        self.turn_terminators = frozenset({vocab["<|im_end|>"]} if "<|im_end|>" in vocab else eos)

        self._token_bytes = _token_bytes(tokenizer)
        markers = {"think_open": "<think>", "think_close": "</think>",
                   "call_open": "<tool_call>", "call_close": "</tool_call>"}
        ids = {field: vocab.get(token) for field, token in markers.items()}
        self._markup = Markup(
            **ids, text={ids[f]: markers[f].encode() for f in markers if ids[f] is not None}
        )
        self._starts_in_reasoning = self._prompt_opens_reasoning()
        self._window = self._template_window()

    def render(self, conversation: Conversation) -> list[int]:
        messages, tools = hf_messages(conversation)
        return self._encoder.encode(messages, tools)

    def render_tail(self, conversation: Conversation, covered: Covered) -> Tail | None:
        return self._window.tail(conversation, covered) if self._window is not None else None

    def parser(self) -> HermesOutputParser:
        return HermesOutputParser(
            self._token_bytes, self._markup, frozenset(self.stop_token_ids), self._starts_in_reasoning
        )

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def _prompt_opens_reasoning(self) -> bool:
        """Whether the generation prompt leaves a `<think>` open (the model starts mid-reasoning)."""
        think_open, think_close = self._markup.think_open, self._markup.think_close
        if think_open is None:
            return False
        ids = self.render(Conversation(items=[Message(role="user", text="Hi")]))
        last_open = max((i for i, t in enumerate(ids) if t == think_open), default=-1)
        last_close = max((i for i, t in enumerate(ids) if t == think_close), default=-1)
        return last_open > last_close

    def _template_window(self) -> TemplateWindow | None:
        """Windowed renders find turns by their terminators' text: each must be markup that no
        other added token's text contains."""
        markup = [token.content for token in self.tokenizer.added_tokens_decoder.values()]
        strings = self.tokenizer.convert_ids_to_tokens(sorted(self.turn_terminators))
        if not all(s in markup and sum(s in m for m in markup) == 1 for s in strings):
            return None
        return TemplateWindow(self, self._encoder, strings)


def load_hf_format(tokenizer_path: str | Path, **options: Any) -> HFChatFormat:
    """An `HFChatFormat` from a tokenizer dir (or hub name); eos ids from generation_config.json too."""
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path))
    generation_config = Path(tokenizer_path) / "generation_config.json"
    if generation_config.is_file() and "extra_eos_ids" not in options:
        eos = json.loads(generation_config.read_text()).get("eos_token_id")
        options["extra_eos_ids"] = [eos] if isinstance(eos, int) else list(eos or [])
    return HFChatFormat(tokenizer, **options)


def _token_bytes(tokenizer: PreTrainedTokenizerFast) -> list[bytes]:
    """The bytes each id decodes to; special (control) tokens decode to nothing."""
    backend = tokenizer.backend_tokenizer
    if not isinstance(backend.decoder, decoders.ByteLevel):
        raise ValueError(  # noqa: TRY004 (a tokenizer we cannot stream, not a wrong argument type)
            f"the hf format streams byte-level BPE tokenizers only; this one decodes with {backend.decoder!r}"
        )
    to_latin1 = str.maketrans({char: chr(byte) for byte, char in bytes_to_unicode().items()})
    vocab = backend.get_vocab(with_added_tokens=False)
    added = tokenizer.added_tokens_decoder
    table = [b""] * (max([*vocab.values(), *added]) + 1)
    for token, token_id in vocab.items():
        table[token_id] = token.translate(to_latin1).encode("latin-1")
    for token_id, token in added.items():
        table[token_id] = b"" if token.special else token.content.encode()
    return table
