"""The formats suite's tokenizers and formats, one fixture pair a family from the tables below (as
TINY_MODELS gives the tiny models' fixtures in tests/conftest.py): each tokenizer is the session's
one for its dir (tests/support/shared_tokenizers.py), each format is loaded once a session."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.shared_tokenizers import shared_tokenizer


@dataclass(frozen=True)
class TokenizerDir:
    """Where a family's tokenizer dir is built: a `module:function` of tests/support, or (`stand_in`) the
    name of a stand-in family of tests/support/stand_in_families.py."""

    about: str
    build: str = ""
    stand_in: str = ""

    def path(self) -> Any:
        if self.stand_in:
            from tests.support import stand_in_families

            return stand_in_families.stand_in_dir(getattr(stand_in_families, self.stand_in))
        module, function = self.build.split(":")
        return getattr(importlib.import_module(module), function)()


# Each gives the session fixture `{key}_tokenizer`.
TOKENIZERS = {
    "qwen36": TokenizerDir("Qwen3.5/3.6's real vocabulary and added tokens, with the published Qwen3.6 chat template.",
                           "tests.support.qwen36:qwen36_tokenizer_dir"),
    "glm": TokenizerDir("GLM-4.5/4.6's added tokens at their real ids on a stand-in BPE, with the published GLM-4.6 "
                        "template.", "tests.support.glm:glm_tokenizer_dir"),
    "deepseek": TokenizerDir("DeepSeek's BPE with DeepSeek-V3.1's added tokens at their ids and the published V3.1 "
                             "template.", "tests.support.deepseek:deepseek_tokenizer_dir"),
    "kimi": TokenizerDir("Kimi-K2's control tokens at their real ids on a stand-in BPE, with the published "
                         "K2-Thinking template.", "tests.support.kimi:kimi_tokenizer_dir"),
    "llama3": TokenizerDir("Llama 3.1's special tokens at their real ids on a stand-in BPE, with vLLM's llama3.1 JSON "
                           "template.", "tests.support.llama3:llama3_tokenizer_dir"),
    "deepseek_v4": TokenizerDir("DeepSeek-V4's real tokenizer (deepseek-tokenizer's files as they are; no chat "
                                "template).", "tests.support.deepseek_v4:deepseek_v4_tokenizer_dir"),
    "deepseek_v41": TokenizerDir("DeepSeek-V4's real tokenizer with V4.1's `<｜System｜>` added "
                                 "(tests/support/deepseek_v4.py).", "tests.support.deepseek_v4:deepseek_v41_tokenizer_dir"),
    "minimax": TokenizerDir("MiniMax-M2's control tokens at their real ids on a stand-in BPE, with the published "
                            "MiniMax-M2 template.", "tests.support.minimax:minimax_tokenizer_dir"),
    "gemma4": TokenizerDir("Gemma 4's control tokens at their real ids on a stand-in BPE, with the published Gemma 4 "
                           "template.", "tests.support.gemma4:gemma4_tokenizer_dir"),
    "seed_oss": TokenizerDir("Seed-OSS's control tokens on a stand-in BPE, with the published Seed-OSS template.",
                             stand_in="SEED_OSS"),
    "step3p5": TokenizerDir("Step-3.5/3.7's control tokens on a stand-in BPE, with the published Step-3.7-Flash "
                            "template.", stand_in="STEP3P5"),
    "llama4": TokenizerDir("Llama 4's control tokens on a stand-in BPE, with vLLM's Llama 4 pythonic template.",
                           stand_in="LLAMA4"),
    "olmo3": TokenizerDir("Olmo 3's control tokens on a stand-in BPE, with vLLM's Olmo 3 template.", stand_in="OLMO3"),
    "lfm2": TokenizerDir("LFM2's control tokens on a stand-in BPE, with the published LFM2.5-8B-A1B template.",
                         stand_in="LFM2"),
    "llama4_json": TokenizerDir("Llama 4's control tokens on a stand-in BPE, with vLLM's Llama 4 JSON template.",
                                stand_in="LLAMA4_JSON"),
    "xlam": TokenizerDir("ChatML tokens on a stand-in BPE, with vLLM's xLAM (Qwen) template.", stand_in="XLAM"),
    "phi4_mini": TokenizerDir("Phi-4-mini's control tokens on a stand-in BPE, with vLLM's Phi-4-mini template.",
                              stand_in="PHI4_MINI"),
    "llama32": TokenizerDir("Llama 3's control tokens on a stand-in BPE, with vLLM's Llama 3.2 pythonic template.",
                            stand_in="LLAMA32"),
    "granite4": TokenizerDir("Granite 4.0's role and call tokens on a stand-in BPE, with the published Granite 4.0 "
                             "template.", stand_in="GRANITE4"),
    "nemotron_v3": TokenizerDir("Nemotron 3's ChatML and call tokens on a stand-in BPE, with the published "
                                "Nemotron-3-Nano template.", stand_in="NEMOTRON_V3"),
    "internlm2": TokenizerDir("InternLM2's control tokens on a stand-in BPE, with vLLM's InternLM2 tool template.",
                              stand_in="INTERNLM2"),
    "apertus": TokenizerDir("Apertus' control tokens on a stand-in BPE, with vLLM's Apertus tool template.",
                            stand_in="APERTUS"),
    "kimi_k3": TokenizerDir("Kimi-K3's tag tokens on a stand-in BPE, with the published Kimi-K3 template.",
                            stand_in="KIMI_K3"),
}


@dataclass(frozen=True)
class Format:
    """The HF format on `TOKENIZERS[tokenizer]` with these options (`load`: from its dir, as the gateway loads
    it, with generation_config.json's stop ids)."""

    tokenizer: str
    about: str
    options: dict[str, Any] = field(default_factory=dict)
    load: bool = False


# Each gives the session fixture `{key}_format`; every one reads a family's calls off its template unless told.
FORMATS = {
    **{key: Format(key, "The HF format on it: the family's calls, picked from the template.") for key in (
        "qwen36", "glm", "deepseek", "kimi", "minimax", "seed_oss", "step3p5", "llama4", "olmo3", "lfm2",
        "llama4_json", "xlam", "phi4_mini", "llama32", "granite4", "nemotron_v3", "internlm2", "apertus",
        "kimi_k3")},
    "llama3": Format("llama3", "The HF format on it (with generation_config's stop ids): llama3_json calls.", load=True),
    "gemma4": Format("gemma4", "The HF format on it (with generation_config's stop ids): gemma4 calls.", load=True),
    "deepseek_v4": Format("deepseek_v4", "vLLM's `deepseek_v4` parser: DeepSeek's V4 encoder, thinking on (V4's "
                          "default).", {"tool_parser": "deepseek_v4", "reasoning_parser": "deepseek_v4"}),
    "deepseek_v4_chat": Format("deepseek_v4", "DeepSeek-V4 with thinking off: output starts after the prompt's "
                               "`</think>`.", {"tool_parser": "deepseek_v4", "enable_thinking": False}),
    "deepseek_v32": Format("deepseek_v4", "DeepSeek's V3.2 encoder and `function_calls` markup (`deepseek_v32`) on "
                           "V4's vocabulary, thinking off.", {"tool_parser": "deepseek_v32",
                                                              "reasoning_parser": "deepseek_r1"}),
    "deepseek_v41": Format("deepseek_v41", "vLLM's `deepseek_v41` parser: DeepSeek's V4.1 encoder, thinking on (its "
                           "default).", {"tool_parser": "deepseek_v41", "reasoning_parser": "deepseek_v41"}),
    "deepseek_v41_chat": Format("deepseek_v41", "DeepSeek-V4.1 with thinking off: output starts after the prompt's "
                                "`</think>`.", {"tool_parser": "deepseek_v41", "enable_thinking": False}),
}


def _tokenizer_fixture(key: str, spec: TokenizerDir) -> Callable[[], Any]:
    def tokenizer() -> Any:
        return shared_tokenizer(spec.path())

    tokenizer.__doc__ = spec.about
    return pytest.fixture(scope="session", name=f"{key}_tokenizer")(tokenizer)


def _format_fixture(key: str, spec: Format) -> Callable[[pytest.FixtureRequest], Any]:
    def chat_format(request: pytest.FixtureRequest) -> Any:
        from gateway.formats.hf.format import HFChatFormat, load_hf_format
        from gateway.tokenfix.locality import failing_kinds

        if spec.load:
            return load_hf_format(TOKENIZERS[spec.tokenizer].path(), locality=failing_kinds, **spec.options)
        tokenizer = request.getfixturevalue(f"{spec.tokenizer}_tokenizer")
        return HFChatFormat(tokenizer, locality=failing_kinds, **spec.options)

    chat_format.__doc__ = spec.about
    return pytest.fixture(scope="session", name=f"{key}_format")(chat_format)


for _key, _spec in TOKENIZERS.items():
    globals()[f"{_key}_tokenizer"] = _tokenizer_fixture(_key, _spec)
for _key, _format in FORMATS.items():
    globals()[f"{_key}_format"] = _format_fixture(_key, _format)


@pytest.fixture(scope="session")
def qwen_tokenizer(tokenizer):
    return tokenizer


@pytest.fixture(scope="session")
def mistral_format():
    """The Mistral format on a v13 tekken file (Devstral / Magistral: `[ARGS]`, `[THINK]`)."""
    from gateway.formats.mistral.format import load_mistral_format
    from tests.support.mistral import tekken_file

    return load_mistral_format(tekken_file("v13"))
