"""How many prompt tokens an image becomes: the counting the context-length check needs.

The gateway sends one placeholder per image; vLLM's processor expands it to the image's patch
count. For Qwen-VL-style processors (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5/3.6) that count is
fixed by the image's size and the model's `preprocessor_config.json`: the image is resized to
multiples of patch × merge within [min_pixels, max_pixels] (`smart_resize`, the function vLLM
takes from transformers' Qwen2-VL image processor) and every merge² patches make one token.
A processor of another kind is counted as its placeholder only (a lower bound; vLLM's count is
what usage reports).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PatchGrid", "is_vision_model", "load_grid"]


@dataclass(frozen=True, slots=True)
class PatchGrid:
    patch_size: int = 14
    merge_size: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 14 * 14 * 4 * 1280

    def resized(self, width: int, height: int) -> tuple[int, int]:
        """transformers' `smart_resize` (Qwen2-VL), as (width, height)."""
        factor = self.patch_size * self.merge_size
        if max(height, width) / min(height, width) > 200:
            raise ValueError(f"an image's aspect ratio must be under 200, got {width}×{height}")
        h_bar = round(height / factor) * factor
        w_bar = round(width / factor) * factor
        if h_bar * w_bar > self.max_pixels:
            beta = math.sqrt((height * width) / self.max_pixels)
            h_bar = max(factor, math.floor(height / beta / factor) * factor)
            w_bar = max(factor, math.floor(width / beta / factor) * factor)
        elif h_bar * w_bar < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h_bar = math.ceil(height * beta / factor) * factor
            w_bar = math.ceil(width * beta / factor) * factor
        return w_bar, h_bar

    def tokens(self, width: int, height: int) -> int:
        w_bar, h_bar = self.resized(width, height)
        return (w_bar // self.patch_size) * (h_bar // self.patch_size) // (self.merge_size ** 2)


def load_grid(model_dir: str | Path) -> PatchGrid | None:
    """The model's Qwen-VL-style patch grid from preprocessor_config.json (None: not that kind)."""
    path = Path(model_dir) / "preprocessor_config.json"
    try:
        config = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return None
    if "merge_size" not in config or "patch_size" not in config:
        return None
    size = config.get("size") or {}
    default = PatchGrid()
    return PatchGrid(patch_size=int(config["patch_size"]), merge_size=int(config["merge_size"]),
                     min_pixels=int(config.get("min_pixels") or size.get("shortest_edge") or default.min_pixels),
                     max_pixels=int(config.get("max_pixels") or size.get("longest_edge") or default.max_pixels))


def is_vision_model(model_dir: str | Path) -> bool:
    """config.json declares a vision encoder (`vision_config`, top level or in the text model's)."""
    path = Path(model_dir) / "config.json"
    try:
        config = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return False
    return bool(config.get("vision_config"))
