"""Model formats: how a model family renders prompts and writes its output.

Other layers use: `load_format` (here: the served model's format), `base` (the `ChatFormat` contract
and the parse events every format emits), `families` (the registry of chat-template families, by
vLLM's parser names) and `length` (a prompt's length bound, before rendering). A format with more
than one module is a sub-package: `hf` (chat-template models), `harmony` (gpt-oss), `mistral` and
`dsml` (DeepSeek-V3.2, V4, V4.1). The `_`-named modules are the families and what they share
(call parsers, schema values, tool grammars), for this package alone."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from gateway.formats.base import ChatFormat, LocalityProbe

__all__ = ["load_format"]

log = logging.getLogger(__name__)


def detect_format(model: str) -> str:
    """`harmony` for gpt-oss models (config.json model_type), else `hf` (a chat template)."""
    config_path = Path(model) / "config.json"
    try:
        if config_path.is_file():
            model_type = json.loads(config_path.read_text()).get("model_type")
        else:
            from transformers import AutoConfig

            model_type = AutoConfig.from_pretrained(model).model_type
    except (OSError, ValueError) as exc:
        log.info("cannot read the model config of %s (%s); assuming a chat-template model", model, exc)
        return "hf"
    return "harmony" if model_type == "gpt_oss" else "hf"


def load_format(model: str, *, tokenizer: str | None = None, chat_format: str = "auto",
                reasoning_parser: str = "auto", tool_parser: str = "auto",
                locality: LocalityProbe | None = None) -> ChatFormat:
    """The model's format; `locality` decides which new items a chat template renders alone (see
    `HFChatFormat`)."""
    kind = detect_format(model) if chat_format == "auto" else chat_format
    if chat_format == "auto" and _mistral(tokenizer or model, tool_parser, reasoning_parser):
        kind = "mistral"
    if kind == "mistral":
        from gateway.formats.mistral.format import load_mistral_format

        return load_mistral_format(tokenizer or model)
    if kind == "harmony":
        from gateway.formats.harmony.format import load_harmony_format

        return load_harmony_format()
    if kind == "hf":
        from gateway.formats.hf.format import load_hf_format

        return load_hf_format(tokenizer or model, tool_parser=tool_parser, reasoning_parser=reasoning_parser,
                              locality=locality)
    raise ValueError(f"unknown chat format {kind!r}; expected auto, harmony or hf")


def _mistral(path: str, tool_parser: str, reasoning_parser: str) -> bool:
    """Mistral's encoder renders when vLLM's flags name it or the model ships `tekken.json` (as
    vLLM's `--tokenizer-mode auto` picks Mistral's tokenizer then)."""
    from gateway.formats.mistral.format import is_mistral_dir

    return "mistral" in (tool_parser, reasoning_parser) or is_mistral_dir(path)
