"""Qwen2.5/Qwen3's hermes JSON calls (`<tool_call>{"name": …, "arguments": …}</tool_call>`) and
`none`: Qwen's markers without calls, every call markup text.

Hermes is the family of a template no other family claims (it detects every template, so it
comes last in gateway/formats/families.py); its parser is `hf.parser`'s, which every other
family's builds on. `none` is what vLLM's `--tool-call-parser none` names: reasoning still parsed
(unless `--reasoning-parser none`), calls left as the text the model wrote.
"""

from __future__ import annotations

from gateway.formats._family import Family

__all__ = ["HERMES", "NONE"]

# Qwen's image placeholder: its templates write `<|vision_start|><|image_pad|><|vision_end|>` per image.
IMAGE_PAD = "<|image_pad|>"

HERMES = Family(name="hermes", tool_parsers=("hermes",), reasoning_parsers=("qwen3",),
                detect=lambda template: True, image=IMAGE_PAD, grammar="hermes")
NONE = Family(name="none", tool_parsers=("none",), markers={"call_open": None, "call_close": None})
