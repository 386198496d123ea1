"""Mistral tekken tokenizer files built offline, and a tiny random model on one.

The BPE is Mistral's own tekken vocabulary from PyPI `mistral-common` (`data/tekken_240911.json`:
Mistral Nemo / Pixtral's 150,000 ranks, 131,072 ids in use, the first 1,000 of them control
tokens). That file is a v3 tokenizer with only the first 20 control tokens named; the files of
Mistral Small 3.1+ (v11), Devstral and Magistral (v13) name more of the 1,000 at fixed ranks:
`[ARGS]`=32, `[CALL_ID]`=33, and Magistral's `[THINK]`=34, `[/THINK]`=35 (as mistral-common's own
tests lay them out), `<SPECIAL_N>` for the rest. `tekken_file(version)` writes the vocabulary with
that layout and the version, so mistral-common loads it exactly as it loads a model's `tekken.json`.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

from gateway.ops._cache import building, cache_dir

VOCAB_SIZE = 131072  # the embedding size of Mistral Nemo / Small / Devstral (tekken's default_vocab_size)
NAMED = {0: "<unk>", 1: "<s>", 2: "</s>", 3: "[INST]", 4: "[/INST]", 5: "[AVAILABLE_TOOLS]", 6: "[/AVAILABLE_TOOLS]",
         7: "[TOOL_RESULTS]", 8: "[/TOOL_RESULTS]", 9: "[TOOL_CALLS]", 10: "[IMG]", 11: "<pad>", 12: "[IMG_BREAK]",
         13: "[IMG_END]", 14: "[PREFIX]", 15: "[MIDDLE]", 16: "[SUFFIX]", 17: "[SYSTEM_PROMPT]",
         18: "[/SYSTEM_PROMPT]", 19: "[TOOL_CONTENT]"}
V11_NAMED = {32: "[ARGS]", 33: "[CALL_ID]"}
THINK_NAMED = {34: "[THINK]", 35: "[/THINK]"}
IDS = {name: rank for rank, name in {**NAMED, **V11_NAMED, **THINK_NAMED}.items()}
EOS = 2


def tekken_file(version: str = "v13") -> Path:
    """A dir holding `tekken.json` of `version` (v3, v7: the deprecated layout; v11: + `[ARGS]`,
    `[CALL_ID]`; v13: + `[THINK]`, `[/THINK]`), built once."""
    target = cache_dir() / f"mistral-tekken-{version}-v1"
    if not (target / "tekken.json").is_file():
        with building(target) as tmp:
            _build(tmp / "tekken.json", version)
    return target


def _build(out: Path, version: str) -> None:
    source = json.loads(files("mistral_common").joinpath("data", "tekken_240911.json").read_text(encoding="utf-8"))
    config = {**source["config"], "version": version}
    spec: dict = {"config": config, "vocab": source["vocab"]}
    if version not in ("v3", "v7"):
        named = {**NAMED, **V11_NAMED, **(THINK_NAMED if version not in ("v11",) else {})}
        count = config["default_num_special_tokens"]
        spec["special_tokens"] = [{"rank": i, "token_str": named.get(i, f"<SPECIAL_{i}>"), "is_control": True}
                                  for i in range(count)]
    out.write_text(json.dumps(spec, ensure_ascii=False))


def mistral_model_dir() -> Path:
    """A tiny random model (Qwen3's architecture: vLLM only needs the ids) with tekken's vocabulary
    size, `tekken.json` (v13) beside it, that vLLM-CPU serves with `--tokenizer-mode mistral`."""
    from gateway.ops.tiny_models import tiny_model

    return tiny_model("tiny-mistral-v13-v1", tekken_file("v13"), VOCAB_SIZE, [EOS], max_positions=32768)
