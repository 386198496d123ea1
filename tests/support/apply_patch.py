"""Codex's freeform `apply_patch` tool, as the real Codex CLI sends it, and a check that a patch
parses by its Lark grammar (with the `lark` package).

`tests/data/codex/apply_patch.lark` is the grammar's text exactly as Codex 0.169 sent it
(`format.definition` of the `apply_patch` tool in
`tests/data/codex/http_4_custom_tool_apply_patch_roundtrip_gpt55.json`, 578 characters, sha256
`d6367f4826ed608c424b0a308f3d6163527df63c22513d089b91863552f8bfeb`); Codex's source holds it as
`codex-rs/core/src/tools/handlers/tool_apply_patch.lark` of openai/codex (commit
71163530a46dc568775f9ee95a9b57de3385cd9a, identical but for one `#` comment line), included by
`create_apply_patch_freeform_tool` (`codex-rs/tools/src/apply_patch_tool.rs`, commit
4275ad2b58d8c365f1568777ef01e59f516beee8).

Lark's own parsers refuse terminals that can match nothing (the grammar's `/(.*)/`, which
OpenAI's engine takes), so `parses` reads the grammar with each `/(.*)/` written as the same
language `/(.+)/?` and parses with Earley.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

__all__ = ["APPLY_PATCH_TOOL", "GRAMMAR", "parses"]

GRAMMAR = (Path(__file__).resolve().parents[1] / "data" / "codex" / "apply_patch.lark").read_text()
APPLY_PATCH_TOOL = {
    "type": "custom", "name": "apply_patch",
    "description": "The `apply_patch` tool can be used to edit files. This is a FREEFORM tool, so do not wrap the "
                   "patch in JSON.",
    "format": {"type": "grammar", "syntax": "lark", "definition": GRAMMAR},
}


@functools.cache
def _parser():
    from lark import Lark

    return Lark(GRAMMAR.replace("/(.*)/", "/(.+)/?"), parser="earley", lexer="dynamic")


def parses(text: str) -> bool:
    from lark.exceptions import LarkError

    try:
        _parser().parse(text)
    except LarkError:
        return False
    return True


def json_wrapped(text: str) -> str:
    """The patch as a JSON string's contents (how a JSON call spells it)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]
