"""Codex-shaped Responses histories of a given size: a developer prompt, then tool calls with ~3 KB outputs."""

from __future__ import annotations

import json
import random
from typing import Any

SHELL_TOOL = {
    "type": "function", "name": "shell", "description": "Runs a shell command and returns its output.",
    "parameters": {"type": "object", "properties": {
        "command": {"type": "array", "items": {"type": "string"}, "description": "The command to execute"},
        "workdir": {"type": "string", "description": "The working directory"},
    }, "required": ["command"]},
}
DEVELOPER_PROMPT = (
    "You are a coding agent running in a terminal. Read files before changing them, keep changes small, "
    "run the tests after each change and report what you did. "
) * 40
CHARS_PER_TOKEN = 3.6  # of the generated outputs, measured with the Qwen3 and o200k tokenizers (±10%)

_WORDS = ("self", "value", "result", "items", "config", "request", "response", "token", "index", "count",
          "parser", "buffer", "state", "error", "return", "yield", "async", "await", "import", "from")


def tool_output(rng: random.Random, size: int = 3000) -> str:
    """Something like a file listing or a source file: ~`size` characters of code-ish lines."""
    lines: list[str] = []
    total = 0
    while total < size:
        depth = rng.randrange(0, 3)
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randrange(3, 9)))
        line = "    " * depth + f"{words} = {rng.randrange(10_000)}  # {rng.choice(_WORDS)}"
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)


def history(tokens: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """Responses `input` items of about `tokens` tokens."""
    rng = random.Random(seed)
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": DEVELOPER_PROMPT},
        {"type": "message", "role": "user", "content": "The tests in tests/test_parser.py fail; fix them."},
    ]
    size = len(DEVELOPER_PROMPT) / CHARS_PER_TOKEN
    call = 0
    while size < tokens:
        call += 1
        output = tool_output(rng)
        arguments = json.dumps({"command": ["bash", "-lc", f"cat src/module_{call}.py"], "workdir": "/repo"})
        items += [
            {"type": "function_call", "call_id": f"call_{call}", "name": "shell", "arguments": arguments},
            {"type": "function_call_output", "call_id": f"call_{call}", "output": output},
        ]
        size += (len(output) + len(arguments) + 40) / CHARS_PER_TOKEN
    return items
