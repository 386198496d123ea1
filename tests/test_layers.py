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


def test_only_the_door_writes_a_store():
    """Every store write under gateway/ is the door's (gateway/pipeline/session.py), and what a turn
    leaves behind is written only when the exchange calls (scripts/check_stores.py)."""
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_stores.py")], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0 and result.stdout == "", result.stdout


def test_the_store_check_sees_a_write_around_the_door(tmp_path):
    """The check reads the modules as written: a transport that evicts a lane itself, a tool loop
    that records its rollout, a route that stores a snapshot, are each found."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import check_stores
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    (tmp_path / "gateway" / "ws").mkdir(parents=True)
    (tmp_path / "gateway" / "pipeline").mkdir()
    (tmp_path / "gateway" / "ws" / "socket.py").write_text(
        "from gateway.pipeline import session\n"
        "from gateway.pipeline.session import warm_up\n"
        "def failed(self, lane):\n"
        "    self.cache.evict(lane)\n"
        "async def later(runtime, request, response, rollout, record, state):\n"
        "    await session.store_snapshot(runtime, request, response)\n"
        "    await runtime.store.commit_rollout(rollout, record, state)\n"
        "    await warm_up(runtime, request)\n"
        "    return runtime.store.rollout_summary()\n")  # a read
    (tmp_path / "gateway" / "pipeline" / "exchange.py").write_text(
        "from gateway.pipeline import session\n"
        "async def run(turn):\n"
        "    await session.commit(turn)\n")
    assert check_stores.writes_around_the_door(tmp_path) == [
        ("gateway/ws/socket.py", 4, "cache.evict"), ("gateway/ws/socket.py", 6, "session.store_snapshot"),
        ("gateway/ws/socket.py", 7, "store.commit_rollout"), ("gateway/ws/socket.py", 8, "session.warm_up")]


def test_the_layer_check_sees_an_import_of_another_packages_private_module(tmp_path):
    """A private module (`_name.py`) is its package's own: the package, and the packages inside it,
    may import it; another package, bench or a script may not; tests are not read."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import check_layers
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    files = {
        "gateway/server/_metrics.py": "__all__ = ['collect']\ndef collect(): ...\n",
        "gateway/server/app.py": "from gateway.server import _metrics\n",  # its own package
        "gateway/server/routes/websocket.py": "from gateway.server._metrics import collect\n",  # a package inside
        "gateway/server/http.py": "from gateway.server.routes import _frames\n",  # a package's, from above it
        "gateway/server/routes/_frames.py": "",
        "gateway/adapters/turns.py": "def later():\n    import gateway.server._metrics\n",
        "gateway/pipeline/session.py": "from gateway.server import _metrics as metrics, app\n",
        "bench/hotpath.py": "from gateway.server._metrics import collect\nfrom gateway.server.app import _private_name\n",
        "tests/server/test_metrics.py": "from gateway.server._metrics import collect\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert check_layers.private_imports(tmp_path) == [
        ("bench/hotpath.py", "gateway.server._metrics", "gateway.server"),
        ("gateway/adapters/turns.py", "gateway.server._metrics", "gateway.server"),
        ("gateway/pipeline/session.py", "gateway.server._metrics", "gateway.server"),
        ("gateway/server/http.py", "gateway.server.routes._frames", "gateway.server.routes"),
    ]
