"""Writes openai-schemas.json: the schemas the conformance test validates against, with
everything they reference, taken from OpenAI's published OpenAPI description.

    python tests/data/openapi/extract.py path/to/openai-openapi/openapi.yaml COMMIT

Source: https://github.com/openai/openai-openapi (openapi.yaml). The whole description is
3 MB; the closure of the roots below is what the tests need.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOTS = ["ResponseStreamEvent", "Response", "CreateChatCompletionResponse", "CreateChatCompletionStreamResponse",
         "ErrorResponse", "ResponseItemList", "CompactResource"]
PREFIX = "#/components/schemas/"


def _refs(node: object, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(PREFIX):
            found.add(ref[len(PREFIX):])
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def main(path: str, commit: str) -> None:
    schemas = yaml.safe_load(Path(path).read_text())["components"]["schemas"]
    wanted, todo = set(), list(ROOTS)
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted.add(name)
        found: set[str] = set()
        _refs(schemas[name], found)
        todo += sorted(found - wanted)
    out = {"source": f"https://github.com/openai/openai-openapi/blob/{commit}/openapi.yaml",
           "commit": commit, "roots": ROOTS,
           "components": {"schemas": {name: schemas[name] for name in sorted(wanted)}}}
    target = Path(__file__).with_name("openai-schemas.json")
    target.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"{len(wanted)} schemas, {target.stat().st_size} bytes -> {target}")


if __name__ == "__main__":
    main(*sys.argv[1:])
