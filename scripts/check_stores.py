"""The stores have one door (docs/architecture.md); prints every write that goes around it.

The stores (gateway/store/: sessions, stored responses, rollouts, conversations, and a
WebSocket connection's cache of its lanes' latest responses) are written only by the door:
gateway/pipeline/session.py (and gateway/pipeline/conversations.py for conversation records),
and what a turn leaves behind only through the exchange (gateway/pipeline/exchange.py: its
commit or forget, a warm-up, a background response's state), so that a turn that failed leaves
nothing behind wherever it ran. Two rules, read from the syntax tree of every module under
gateway/ outside the stores themselves:

1. a store's writing method (`runtime.store.put_session(…)`, `lane.cache.evict(…)`, …) is
   called only in the door;
2. the door's functions that record a turn are called only by the exchange.

Resource endpoints that delete a record (DELETE /v1/responses/{id}, /v1/rollouts/{id}) or edit
a conversation call the door's functions for that; they are no turn's.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

DOOR = {"gateway/pipeline/session.py", "gateway/pipeline/conversations.py"}
EXCHANGE = "gateway/pipeline/exchange.py"
# The writing methods of each store, by the name a store goes by where it is written
# (`runtime.store`, `runtime.conversations`, a lane's `cache`, the memory stores behind a backend).
WRITES = {
    "store": {"put_session", "discard_session", "put_response", "delete_response", "commit_rollout",
              "delete_rollout"},
    "conversations": {"put"},
    "cache": {"put", "evict"},
    "sessions": {"put", "discard"},
    "responses": {"put", "delete"},
    "rollouts": {"commit", "delete"},
    "rollout": {"commit"},  # a rollout call's `Pending`
    "pending": {"commit"},
}
# The door's functions that record what a turn leaves behind.
TURN_WRITES = {"commit", "commit_generation", "forget", "warm_up", "store_snapshot"}


def writes_around_the_door(root: Path) -> list[tuple[str, int, str]]:
    """(file, line, what) for each store write outside the door, and each turn write outside the exchange."""
    found = []
    for path in sorted((root / "gateway").rglob("*.py")):
        name = str(path.relative_to(root))
        if name.startswith("gateway/store/"):
            continue
        tree = ast.parse(path.read_text())
        from_door = _imported_from_door(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute):
                owner = _last_name(func.value)
                if name not in DOOR and func.attr in WRITES.get(owner or "", ()):
                    found.append((name, node.lineno, f"{owner}.{func.attr}"))
                elif name != EXCHANGE and owner == "session" and func.attr in TURN_WRITES:
                    found.append((name, node.lineno, f"session.{func.attr}"))
            elif isinstance(func, ast.Name) and func.id in from_door and name != EXCHANGE:
                found.append((name, node.lineno, f"session.{func.id}"))
    return sorted(found)


def _imported_from_door(tree: ast.Module) -> set[str]:
    return {alias.asname or alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "gateway.pipeline.session"
            for alias in node.names if alias.name in TURN_WRITES}


def _last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


if __name__ == "__main__":
    around = writes_around_the_door(Path(__file__).resolve().parents[1])
    for path, line, what in around:
        print(f"{path}:{line}: {what} writes a store outside its door")
    sys.exit(1 if around else 0)
