"""Every import in gateway/ points down the layers (docs/architecture.md), no modules import
each other in a circle, a module uses only what another one declares public (its `__all__`), and
no module imports another package's private module (`_name.py`); prints what breaks these rules.

Every import counts: at module level, inside a function, or under `if TYPE_CHECKING:`. A circle
between modules of one layer is as much a knot for a reader as one across layers. A name missing
from `__all__` is the module's own business: another module that needs it makes it public there.
A private module (`gateway/server/_metrics.py`) is its package's own: the package and the packages
inside it may import it; nothing else under gateway/, bench/, scripts/ or examples/ may (tests/ may).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

RANK = {"ops": 7, "server": 6, "adapters": 5, "ws": 5, "pipeline": 4, "store": 3, "tokenfix": 2,
        "formats": 1, "upstream": 1, "core": 0}
OUTSIDE_TESTS = ("gateway", "bench", "scripts", "examples")  # where a package's private modules stay its own
IMPORT = re.compile(r"^\s*(?:from|import) gateway\.(\w+)", re.MULTILINE)
# `from gateway.a.b import c, d` or `import gateway.a.b`, anywhere in a file.
MODULE_IMPORT = re.compile(r"^[ \t]*from (gateway(?:\.\w+)*) import (?:\(([\w\s,]+)\)|([\w \t,]+))"
                           r"|^[ \t]*import (gateway(?:\.\w+)+)", re.MULTILINE)


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


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module → the gateway modules it imports (a name imported from a package that is a module
    of its own counts as that module)."""
    modules = {_name(root, path): path for path in (root / "gateway").rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for package, wrapped, names, plain in MODULE_IMPORT.findall(path.read_text()):
            names = wrapped or names
            if plain:
                targets = [plain]
            else:
                imported = [each.split()[0] for each in names.split(",") if each.strip()]  # `x as y` → x
                targets = [f"{package}.{each}" if f"{package}.{each}" in modules else package for each in imported]
            graph[name].update(target for target in targets if target in modules and target != name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def private_uses(root: Path) -> list[tuple[str, str, str]]:
    """(importing file, module, name) for each name a gateway module takes from another one whose
    `__all__` does not list it: `from module import name`, or `module.name` on an imported module."""
    paths = {_name(root, path): path for path in (root / "gateway").rglob("*.py")}
    public = {name: _declared(path) for name, path in paths.items()}
    found = []
    for importer, path in sorted(paths.items()):
        tree = ast.parse(path.read_text())
        modules: dict[str, str] = {}  # local name → a gateway module imported whole
        uses: list[tuple[str, str]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("gateway"):
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in paths:
                        modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    else:
                        uses.append((node.module, alias.name))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
                module = modules[node.value.id]
                if f"{module}.{node.attr}" not in paths:
                    uses.append((module, node.attr))
        found += [(str(path.relative_to(root)), module, name) for module, name in dict.fromkeys(uses)
                  if module != importer and module in paths and name not in public[module]]
    return found


def private_imports(root: Path) -> list[tuple[str, str, str]]:
    """(importing file, module, the package it is private to) for each import of a private module
    (a `_name` part in its dotted path) from outside the package that holds it."""
    modules = {_name(root, path) for path in (root / "gateway").rglob("*.py")}
    found = []
    for path in sorted(p for folder in OUTSIDE_TESTS for p in (root / folder).rglob("*.py")):
        importer = _name(root, path)
        for module in dict.fromkeys(_imported(path, modules)):
            parts = module.split(".")
            private = next((i for i, part in enumerate(parts) if part.startswith("_") and not part.startswith("__")),
                           None)
            if private is None:
                continue
            owner = ".".join(parts[:private])
            if not (importer == owner or importer.startswith(owner + ".")):
                found.append((str(path.relative_to(root)), module, owner))
    return found


def _imported(path: Path, modules: set[str]) -> list[str]:
    """The gateway modules a file imports: `from a.b import c` imports `a.b`, and `a.b.c` where
    that is a module of its own."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("gateway"):
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names
                                      if f"{node.module}.{alias.name}" in modules]
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names if alias.name.startswith("gateway")]
    return names


def _declared(path: Path) -> frozenset[str]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return frozenset(ast.literal_eval(node.value))
    return frozenset()


def _name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    bad = upward_imports(root)
    for path, target in bad:
        print(f"{path} imports gateway.{target}, a layer above it")
    knots = circles(import_graph(root))
    for group in knots:
        print(f"import circle: {' ↔ '.join(group)}")
    private = private_uses(root)
    for path, module, name in private:
        print(f"{path} uses {module}.{name}, which {module}'s __all__ does not list")
    inside = private_imports(root)
    for path, module, owner in inside:
        print(f"{path} imports {module}, which is private to {owner}")
    sys.exit(1 if bad or knots or private or inside else 0)
