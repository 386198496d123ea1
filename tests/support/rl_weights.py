"""New weights for a tiny model, as a trainer's step would write them: the same tensor names and
shapes, other values, in a checkpoint dir vLLM's worker `reload_weights` reads
(`POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": DIR}}`).

Written by the vLLM venv's torch + safetensors (the test process has neither), into a copy of
the model dir whose `model.safetensors` is replaced.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from gateway.ops.vllm_process import vllm_python

__all__ = ["stepped_weights"]

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
