"""The uvicorn range pyproject.toml allows is the range the direct writers are tested on.

The body writer, the WebSocket frame writer and the bounded protocols subclass uvicorn's
protocol classes and read their state (gateway/server/body_writer.py, _ws_frames.py,
slow_clients.py): a uvicorn release may rename any of it. The suite runs them on the locked
version, which must be the newest minor the upper bound allows; here they run again on the
lower bound: tests/server/test_body_writer.py in a subprocess whose `uvicorn` is that release,
installed once (no dependencies, ~100 kB) into a cache keyed by its version and laid over .venv.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).parents[2]
CACHE = Path(os.environ.get("GATEWAY_CACHE_DIR", Path.home() / ".cache" / "vllm-gateway"))


def _uvicorn_range() -> tuple[Version, Version]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (req,) = [Requirement(d) for d in deps if Requirement(d).name == "uvicorn"]
    low = [Version(s.version) for s in req.specifier if s.operator == ">="]
    high = [Version(s.version) for s in req.specifier if s.operator == "<"]
    assert low and high, f"uvicorn must be bounded on both sides: {req}"
    return low[0], high[0]


def _locked(name: str) -> Version:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    (version,) = [p["version"] for p in lock["package"] if p["name"] == name]
    return Version(version)


def _overlay(version: Version) -> Path:
    """A directory holding only uvicorn==version, to put before .venv's site-packages."""
    target = CACHE / f"uvicorn-{version}"
    if not (target / ".complete").exists():
        subprocess.run([str(ROOT / "scripts" / "uv.sh"), "pip", "install", "--quiet", "--no-deps",
                        "--python", sys.executable, "--target", str(target), f"uvicorn=={version}"], check=True)
        (target / ".complete").touch()
    return target


def test_the_locked_uvicorn_is_the_top_of_the_allowed_range():
    low, high = _uvicorn_range()
    locked = _locked("uvicorn")
    assert low <= locked < high
    # The upper bound is the first minor not yet tested: the locked version is the one below it.
    assert (locked.major, locked.minor + 1) == (high.major, high.minor), (locked, high)


def test_the_direct_writers_work_on_the_lowest_allowed_uvicorn():
    low, _ = _uvicorn_range()
    env = dict(os.environ, PYTHONPATH=f"{_overlay(low)}{os.pathsep}{ROOT}")
    probe = subprocess.run([sys.executable, "-c", "import uvicorn; print(uvicorn.__version__)"],
                           env=env, capture_output=True, text=True, check=True)
    assert Version(probe.stdout.strip()) == low
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(ROOT / "tests" / "server" / "test_body_writer.py")],
                         env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout
