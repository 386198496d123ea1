"""The two output formats the benchmarks relay: Qwen3 (HF template, hermes) and gpt-oss harmony.

Each comes with the tokenizer dir the gateway loads (built offline by gateway.ops._cache)
and a scripted answer: plain words, one token each (with its leading space: the load
generator counts a delta's tokens by its spaces), one token per chunk, closed by the
format's stop token.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

SENTENCE = " the quick brown fox jumps over the lazy dog while seven kings box"  # one token a word in both


@dataclass(frozen=True)
class BenchModel:
    name: str  # also the served model name the token server reports
    chat_format: str  # the gateway's --chat-format
    model_dir: Path
    header: tuple[int, ...]  # output tokens before the text (make no client event)
    words: tuple[int, ...]  # one sentence, one word per token
    stop: int

    def output(self, count: int) -> list[int]:
        """`count` text tokens between the header and the stop token."""
        words = (self.words * (count // len(self.words) + 1))[:count]
        return [*self.header, *words, self.stop]


@cache
def qwen() -> BenchModel:
    from transformers import AutoTokenizer

    from gateway.ops.qwen_tokenizer import qwen_tokenizer_dir

    path = qwen_tokenizer_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    words = tuple(tokenizer.encode(SENTENCE, add_special_tokens=False))
    return BenchModel("bench-qwen3", "hf", path, (), words, tokenizer.convert_tokens_to_ids("<|im_end|>"))


@cache
def harmony() -> BenchModel:
    from gateway.formats.harmony.format import load_harmony_format
    from tests.support.o200k import ensure_harmony_env, harmony_tokenizer_dir

    ensure_harmony_env()
    encoding = load_harmony_format().encoding

    def special(name: str) -> int:
        return encoding.encode(name, allowed_special={name})[0]

    header = (special("<|channel|>"), *encoding.encode("final"), special("<|message|>"))
    words = tuple(encoding.encode(SENTENCE))
    return BenchModel("bench-harmony", "harmony", harmony_tokenizer_dir(), header, words, special("<|return|>"))


MODELS = {"qwen": qwen, "harmony": harmony}
