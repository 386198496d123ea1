"""Every import in gateway/ points down the layers (docs/architecture.md); prints the ones that do not."""

from __future__ import annotations

import re
import sys
from pathlib import Path

RANK = {"ops": 7, "server": 6, "adapters": 5, "ws": 5, "pipeline": 4, "sessions": 3, "tokenfix": 2,
        "formats": 1, "upstream": 1, "core": 0}
IMPORT = re.compile(r"^\s*(?:from|import) gateway\.(\w+)", re.MULTILINE)


def upward_imports(root: Path) -> list[tuple[str, str]]:
    found = []
    for path in sorted((root / "gateway").rglob("*.py")):
        layer = path.relative_to(root / "gateway").parts[0]
        if layer not in RANK:
            continue
        for target in IMPORT.findall(path.read_text()):
            # ws serves the Responses API over a socket: it may use the adapters, never the reverse.
            if target in RANK and (RANK[target] > RANK[layer] or (layer, target) == ("adapters", "ws")):
                found.append((str(path.relative_to(root)), target))
    return found


if __name__ == "__main__":
    bad = upward_imports(Path(__file__).resolve().parents[1])
    for path, target in bad:
        print(f"{path} imports gateway.{target}, a layer above it")
    sys.exit(1 if bad else 0)
