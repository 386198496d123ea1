"""A Qwen3.6 vision model dir for the protocol tests: Qwen3.5/3.6's tokenizer and published template
(which renders image items as `<|vision_start|><|image_pad|><|vision_end|>`), a config.json with a
`vision_config` (what makes a model vision-capable) and Qwen-VL's preprocessor_config.json (patch 16,
merge 2, as Qwen3-VL and Qwen3.5/3.6 ship it). No weights: the fake upstream generates."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from gateway.ops.cache import building, cache_dir
from tests.support.qwen36 import qwen36_tokenizer_dir

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
