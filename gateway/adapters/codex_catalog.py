"""Codex's model metadata (its `ModelInfo`) for the served model, from what the gateway knows.

Codex reads a model's context window, its apply_patch tool kind, reasoning levels and the
truncation policy from a catalog: `model_catalog_json`, or `GET {base_url}/models?client_version=…`
(`{"models": [ModelInfo, …]}`). The gateway answers the latter from its own knowledge: the
replicas' `max_model_len`, text only, apply_patch as a freeform (custom) tool, which the Responses
adapter offers the model as a function (gateway/adapters/_codex_tools.py). Every field Codex
0.169 requires of an entry is present (the same entry as examples/codex/tiny-qwen3.json).
"""

from __future__ import annotations

from typing import Any

__all__ = ["codex_model_info"]

# Codex's own base prompt is ~3k tokens (with its tools ~8.5k): one line keeps small contexts usable.
BASE_INSTRUCTIONS = "You are a coding agent. Use the tools to change files."


def codex_model_info(model: str, context_window: int | None, *, images: bool = False) -> dict[str, Any]:
    """`images`: the model takes images (Codex then offers `view_image` and `-i`)."""
    return {
        "slug": model, "display_name": model, "description": "served by vllm-gateway", "visibility": "list",
        "supported_in_api": True, "priority": 1, "shell_type": "shell_command", "supported_reasoning_levels": [],
        "apply_patch_tool_type": "freeform", "input_modalities": ["text", "image"] if images else ["text"],
        "context_window": context_window,
        "support_verbosity": False, "truncation_policy": {"mode": "tokens", "limit": 10000},
        "experimental_supported_tools": [], "base_instructions": BASE_INSTRUCTIONS,
    }
