from __future__ import annotations

import pytest

from tests.support.shared_tokenizers import shared_tokenizer


@pytest.fixture(scope="session")
def qwen_tokenizer(tokenizer):
    return tokenizer


@pytest.fixture(scope="session")
def qwen36_tokenizer():
    """Qwen3.5/3.6's real vocabulary and added tokens, with the published Qwen3.6 chat template."""
    from tests.support.qwen36 import qwen36_tokenizer_dir

    return shared_tokenizer(qwen36_tokenizer_dir())


@pytest.fixture(scope="session")
def qwen36_format(qwen36_tokenizer):
    """The HF format on it: XML tool calls, picked from the template."""
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(qwen36_tokenizer, locality=failing_kinds)


@pytest.fixture(scope="session")
def glm_tokenizer():
    """GLM-4.5/4.6's added tokens at their real ids on a stand-in BPE, with the published GLM-4.6 template."""
    from tests.support.glm import glm_tokenizer_dir

    return shared_tokenizer(glm_tokenizer_dir())


@pytest.fixture(scope="session")
def glm_format(glm_tokenizer):
    """The HF format on it: GLM tool calls, picked from the template."""
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(glm_tokenizer, locality=failing_kinds)


@pytest.fixture(scope="session")
def deepseek_tokenizer():
    """DeepSeek's BPE with DeepSeek-V3.1's added tokens at their ids and the published V3.1 template."""
    from tests.support.deepseek import deepseek_tokenizer_dir

    return shared_tokenizer(deepseek_tokenizer_dir())


@pytest.fixture(scope="session")
def deepseek_format(deepseek_tokenizer):
    """The HF format on it: DeepSeek-V3.1 tool calls, picked from the template."""
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(deepseek_tokenizer, locality=failing_kinds)


@pytest.fixture(scope="session")
def kimi_tokenizer():
    """Kimi-K2's control tokens at their real ids on a stand-in BPE, with the published K2-Thinking template."""
    from tests.support.kimi import kimi_tokenizer_dir

    return shared_tokenizer(kimi_tokenizer_dir())


@pytest.fixture(scope="session")
def kimi_format(kimi_tokenizer):
    """The HF format on it: Kimi tool calls, picked from the template."""
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(kimi_tokenizer, locality=failing_kinds)


@pytest.fixture(scope="session")
def mistral_format():
    """The Mistral format on a v13 tekken file (Devstral / Magistral: `[ARGS]`, `[THINK]`)."""
    from gateway.formats.mistral import load_mistral_format
    from tests.support.mistral import tekken_file

    return load_mistral_format(tekken_file("v13"))


@pytest.fixture(scope="session")
def llama3_tokenizer():
    """Llama 3.1's special tokens at their real ids on a stand-in BPE, with vLLM's llama3.1 JSON template."""
    from tests.support.llama3 import llama3_tokenizer_dir

    return shared_tokenizer(llama3_tokenizer_dir())


@pytest.fixture(scope="session")
def llama3_format():
    """The HF format on it (with generation_config's stop ids): llama3_json calls, picked from the template."""
    from gateway.formats.hf import load_hf_format
    from gateway.tokenfix.locality import failing_kinds
    from tests.support.llama3 import llama3_tokenizer_dir

    return load_hf_format(llama3_tokenizer_dir(), locality=failing_kinds)


@pytest.fixture(scope="session")
def deepseek_v4_tokenizer():
    """DeepSeek-V4's real tokenizer (deepseek-tokenizer's files as they are; no chat template)."""
    from tests.support.deepseek_v4 import deepseek_v4_tokenizer_dir

    return shared_tokenizer(deepseek_v4_tokenizer_dir())


@pytest.fixture(scope="session")
def deepseek_v4_format(deepseek_v4_tokenizer):
    """The HF format on it with vLLM's `deepseek_v4` parser: DeepSeek's V4 encoder, thinking on (V4's default)."""
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(deepseek_v4_tokenizer, tool_parser="deepseek_v4", reasoning_parser="deepseek_v4",
                        locality=failing_kinds)


@pytest.fixture(scope="session")
def deepseek_v32_format(deepseek_v4_tokenizer):
    """DeepSeek's V3.2 encoder and `function_calls` markup (`deepseek_v32`) on the same vocabulary, thinking off."""
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(deepseek_v4_tokenizer, tool_parser="deepseek_v32", reasoning_parser="deepseek_r1",
                        locality=failing_kinds)


@pytest.fixture(scope="session")
def deepseek_v41_tokenizer():
    """DeepSeek-V4's real tokenizer with V4.1's `<｜System｜>` added (tests/support/deepseek_v4.py)."""
    from tests.support.deepseek_v4 import deepseek_v41_tokenizer_dir

    return shared_tokenizer(deepseek_v41_tokenizer_dir())


@pytest.fixture(scope="session")
def deepseek_v41_format(deepseek_v41_tokenizer):
    """The HF format on it with vLLM's `deepseek_v41` parser: DeepSeek's V4.1 encoder, thinking on (its default)."""
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(deepseek_v41_tokenizer, tool_parser="deepseek_v41", reasoning_parser="deepseek_v41",
                        locality=failing_kinds)


@pytest.fixture(scope="session")
def deepseek_v41_chat_format(deepseek_v41_tokenizer):
    """DeepSeek-V4.1 with thinking off: output starts after the prompt's `</think>`."""
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(deepseek_v41_tokenizer, tool_parser="deepseek_v41", enable_thinking=False,
                        locality=failing_kinds)


@pytest.fixture(scope="session")
def minimax_tokenizer():
    """MiniMax-M2's control tokens at their real ids on a stand-in BPE, with the published MiniMax-M2 template."""
    from tests.support.minimax import minimax_tokenizer_dir

    return shared_tokenizer(minimax_tokenizer_dir())


@pytest.fixture(scope="session")
def minimax_format(minimax_tokenizer):
    """The HF format on it: MiniMax-M2 tool calls, picked from the template."""
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(minimax_tokenizer, locality=failing_kinds)


@pytest.fixture(scope="session")
def gemma4_tokenizer():
    """Gemma 4's control tokens at their real ids on a stand-in BPE, with the published Gemma 4 template."""
    from tests.support.gemma4 import gemma4_tokenizer_dir

    return shared_tokenizer(gemma4_tokenizer_dir())


@pytest.fixture(scope="session")
def gemma4_format():
    """The HF format on it (with generation_config's stop ids): gemma4 calls, picked from the template."""
    from gateway.formats.hf import load_hf_format
    from gateway.tokenfix.locality import failing_kinds
    from tests.support.gemma4 import gemma4_tokenizer_dir

    return load_hf_format(gemma4_tokenizer_dir(), locality=failing_kinds)


@pytest.fixture(scope="session")
def deepseek_v4_chat_format(deepseek_v4_tokenizer):
    """DeepSeek-V4 with thinking off: output starts after the prompt's `</think>`."""
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(deepseek_v4_tokenizer, tool_parser="deepseek_v4", enable_thinking=False,
                        locality=failing_kinds)


@pytest.fixture(scope="session")
def seed_oss_tokenizer():
    """Seed-OSS's control tokens on a stand-in BPE, with the published Seed-OSS template."""
    from tests.support.stand_in_families import SEED_OSS, stand_in_dir

    return shared_tokenizer(stand_in_dir(SEED_OSS))


@pytest.fixture(scope="session")
def seed_oss_format(seed_oss_tokenizer):
    """The HF format on it: Seed-OSS calls, picked from the template."""
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(seed_oss_tokenizer, locality=failing_kinds)


@pytest.fixture(scope="session")
def step3p5_tokenizer():
    """Step-3.5/3.7's control tokens on a stand-in BPE, with the published Step-3.7-Flash template."""
    from tests.support.stand_in_families import STEP3P5, stand_in_dir

    return shared_tokenizer(stand_in_dir(STEP3P5))


@pytest.fixture(scope="session")
def step3p5_format(step3p5_tokenizer):
    """The HF format on it: Step's XML calls, picked from the template."""
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(step3p5_tokenizer, locality=failing_kinds)


@pytest.fixture(scope="session")
def llama4_tokenizer():
    """Llama 4's control tokens on a stand-in BPE, with vLLM's Llama 4 pythonic template."""
    from tests.support.stand_in_families import LLAMA4, stand_in_dir

    return shared_tokenizer(stand_in_dir(LLAMA4))


@pytest.fixture(scope="session")
def llama4_format(llama4_tokenizer):
    """The HF format on it: Llama 4 pythonic calls, picked from the template."""
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(llama4_tokenizer, locality=failing_kinds)


@pytest.fixture(scope="session")
def olmo3_tokenizer():
    """Olmo 3's control tokens on a stand-in BPE, with vLLM's Olmo 3 template."""
    from tests.support.stand_in_families import OLMO3, stand_in_dir

    return shared_tokenizer(stand_in_dir(OLMO3))


@pytest.fixture(scope="session")
def olmo3_format(olmo3_tokenizer):
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(olmo3_tokenizer, locality=failing_kinds)


@pytest.fixture(scope="session")
def lfm2_tokenizer():
    """LFM2's control tokens on a stand-in BPE, with the published LFM2.5-8B-A1B template."""
    from tests.support.stand_in_families import LFM2, stand_in_dir

    return shared_tokenizer(stand_in_dir(LFM2))


@pytest.fixture(scope="session")
def lfm2_format(lfm2_tokenizer):
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(lfm2_tokenizer, locality=failing_kinds)


def _stand_in_format(name: str):
    from gateway.formats.hf import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds
    from tests.support import stand_in_families

    return HFChatFormat(shared_tokenizer(stand_in_families.stand_in_dir(getattr(stand_in_families, name))),
                        locality=failing_kinds)


@pytest.fixture(scope="session")
def llama4_json_format():
    """Llama 4's control tokens on a stand-in BPE, with vLLM's Llama 4 JSON template."""
    return _stand_in_format("LLAMA4_JSON")


@pytest.fixture(scope="session")
def xlam_format():
    """ChatML tokens on a stand-in BPE, with vLLM's xLAM (Qwen) template."""
    return _stand_in_format("XLAM")


@pytest.fixture(scope="session")
def phi4_mini_format():
    """Phi-4-mini's control tokens on a stand-in BPE, with vLLM's Phi-4-mini template."""
    return _stand_in_format("PHI4_MINI")


@pytest.fixture(scope="session")
def llama4_json_tokenizer(llama4_json_format):
    return llama4_json_format.tokenizer


@pytest.fixture(scope="session")
def xlam_tokenizer(xlam_format):
    return xlam_format.tokenizer


@pytest.fixture(scope="session")
def phi4_mini_tokenizer(phi4_mini_format):
    return phi4_mini_format.tokenizer


@pytest.fixture(scope="session")
def llama32_format():
    """Llama 3's control tokens on a stand-in BPE, with vLLM's Llama 3.2 pythonic template."""
    return _stand_in_format("LLAMA32")


@pytest.fixture(scope="session")
def llama32_tokenizer(llama32_format):
    return llama32_format.tokenizer


@pytest.fixture(scope="session")
def granite4_tokenizer():
    """Granite 4.0's role and call tokens on a stand-in BPE, with the published Granite 4.0 template."""
    from tests.support.stand_in_families import GRANITE4, stand_in_dir

    return shared_tokenizer(stand_in_dir(GRANITE4))


@pytest.fixture(scope="session")
def granite4_format():
    """The HF format on it: Granite's hermes calls, picked from the template."""
    return _stand_in_format("GRANITE4")


@pytest.fixture(scope="session")
def nemotron_v3_tokenizer():
    """Nemotron 3's ChatML and call tokens on a stand-in BPE, with the published Nemotron-3-Nano template."""
    from tests.support.stand_in_families import NEMOTRON_V3, stand_in_dir

    return shared_tokenizer(stand_in_dir(NEMOTRON_V3))


@pytest.fixture(scope="session")
def nemotron_v3_format():
    """The HF format on it: Qwen3's XML calls and `<think>`, picked from the template."""
    return _stand_in_format("NEMOTRON_V3")


@pytest.fixture(scope="session")
def internlm2_format():
    """InternLM2's control tokens on a stand-in BPE, with vLLM's InternLM2 tool template."""
    return _stand_in_format("INTERNLM2")


@pytest.fixture(scope="session")
def internlm2_tokenizer(internlm2_format):
    return internlm2_format.tokenizer


@pytest.fixture(scope="session")
def apertus_format():
    """Apertus' control tokens on a stand-in BPE, with vLLM's Apertus tool template."""
    return _stand_in_format("APERTUS")


@pytest.fixture(scope="session")
def apertus_tokenizer(apertus_format):
    return apertus_format.tokenizer
