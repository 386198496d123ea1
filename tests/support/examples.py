"""Load a script under examples/ as a module, as a trainer would run it (examples/ is no package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

__all__ = ["load_example"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(path: str) -> ModuleType:
    """examples/`path` as a module."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, EXAMPLES / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
