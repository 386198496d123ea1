"""The package's layers import only downward, in no circle, and only what a module declares
public (docs/architecture.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_imports_point_down_in_no_circle_and_take_only_public_names():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_layers.py")], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0 and result.stdout == "", result.stdout


def test_the_runtime_package_holds_no_test_fixtures():
    assert not (ROOT / "gateway" / "fixtures").exists()
    assert not list((ROOT / "gateway").rglob("o200k*.py"))
