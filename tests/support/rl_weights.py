"""New weights for a tiny model, as a trainer's step would write them: the same tensor names and
shapes, other values, in a checkpoint dir vLLM's worker `reload_weights` reads
(`POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": DIR}}`); and LoRA
adapters for it, as `/v1/load_lora_adapter` reads them.

Written by the vLLM venv's torch + safetensors (the test process has neither), into a copy of
the model dir whose `model.safetensors` is replaced.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from gateway.ops.vllm_process import vllm_python

__all__ = ["lora_adapter", "stepped_weights"]

_SCRIPT = """
import sys, torch
from safetensors.torch import load_file, save_file
source, target, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
generator = torch.Generator().manual_seed(1000 + step)
weights = load_file(source)
save_file({name: (t.float() + 0.05 * torch.randn(t.shape, generator=generator)).to(t.dtype).contiguous()
           for name, t in weights.items()}, target, metadata={"format": "pt"})
"""


def stepped_weights(model_dir: Path, out_dir: Path, step: int) -> Path:
    """A copy of `model_dir` at training step `step` (its weights moved by seeded noise): `out_dir`."""
    shutil.copytree(model_dir, out_dir, dirs_exist_ok=True)
    subprocess.run([str(vllm_python()), "-c", _SCRIPT, str(model_dir / "model.safetensors"),
                    str(out_dir / "model.safetensors"), str(step)], check=True, timeout=300)
    return out_dir


_LORA = """
import json, sys, torch
from safetensors.torch import save_file
target, seed, hidden, q_out, v_out, layers, rank = sys.argv[1], *map(int, sys.argv[2:])
generator = torch.Generator().manual_seed(seed)
weights = {}
for layer in range(layers):
    for module, out in (("q_proj", q_out), ("v_proj", v_out)):
        name = f"base_model.model.model.layers.{layer}.self_attn.{module}"
        weights[f"{name}.lora_A.weight"] = 0.5 * torch.randn(rank, hidden, generator=generator)
        weights[f"{name}.lora_B.weight"] = 0.5 * torch.randn(out, rank, generator=generator)
save_file(weights, target + "/adapter_model.safetensors", metadata={"format": "pt"})
json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank,
           "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.0, "bias": "none",
           "fan_in_fan_out": False, "modules_to_save": None, "use_rslora": False, "use_dora": False},
          open(target + "/adapter_config.json", "w"))
"""


def lora_adapter(model_dir: Path, out_dir: Path, seed: int, rank: int = 8) -> Path:
    """A LoRA adapter for `model_dir`'s attention (q_proj, v_proj), written by hand as PEFT saves one
    (`adapter_config.json` + `adapter_model.safetensors`), seeded: `out_dir`."""
    config = json.loads((model_dir / "config.json").read_text())
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(vllm_python()), "-c", _LORA, str(out_dir), str(seed), str(config["hidden_size"]),
                    str(config["num_attention_heads"] * head_dim), str(config["num_key_value_heads"] * head_dim),
                    str(config["num_hidden_layers"]), str(rank)], check=True, timeout=300)
    return out_dir
