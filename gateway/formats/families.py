"""The registry of chat-template families: one line per family, in the order a template is read.

`HFChatFormat` picks a family here by vLLM's parser name or by what the chat template writes
(the first family whose `detect` holds, so the more specific markers come first; hermes, which
holds for any template, last), and the CLI's `--tool-call-parser` / `--reasoning-parser` choices
are read from here. Adding a family is a module declaring its `Family` and a line below.
"""

from __future__ import annotations

from gateway.formats import _apertus as apertus
from gateway.formats import _deepseek as deepseek
from gateway.formats import _gemma4 as gemma4
from gateway.formats import _glm as glm
from gateway.formats import _granite as granite
from gateway.formats import _hermes as hermes
from gateway.formats import _internlm as internlm
from gateway.formats import _json_list as json_list
from gateway.formats import _kimi as kimi
from gateway.formats import _kimi_k3 as kimi_k3
from gateway.formats import _llama3_json as llama3_json
from gateway.formats import _minimax as minimax
from gateway.formats import _pythonic as pythonic
from gateway.formats import _qwen_xml as qwen_xml
from gateway.formats import _seed_oss as seed_oss
from gateway.formats import _step3p5 as step3p5
from gateway.formats._family import Family
from gateway.formats.dsml import family as dsml

__all__ = ["OWN_FORMATS", "by_tool_parser", "of_model_type", "of_template", "reasoning_parser_names",
           "tool_parser_names"]

FAMILIES: tuple[Family, ...] = (
    minimax.FAMILY,  # MiniMax-M2: <minimax:tool_call>
    dsml.V41,  # DeepSeek-V4.1: ｜DSML｜ calls (or model_type deepseek_v41)
    dsml.V4,  # DeepSeek-V4: ｜DSML｜tool_calls (or model_type deepseek_v4)
    dsml.V32,  # DeepSeek-V3.2: ｜DSML｜ (or model_type deepseek_v32)
    gemma4.FAMILY,  # Gemma 4: <|tool_call>call:
    glm.FAMILY,  # GLM-4.5 to GLM-5: <arg_key>
    deepseek.FAMILY,  # DeepSeek-V3.1: <｜tool▁calls▁begin｜>
    kimi.FAMILY,  # Kimi-K2: <|tool_calls_section_begin|>
    kimi_k3.FAMILY,  # Kimi-K3: <|open|>TAG<|sep|> tags (XTML) and <|end_of_msg|>
    pythonic.OLMO3,  # Olmo 3: pythonic calls in <function_calls>
    pythonic.LFM2,  # LFM2 / LFM2.5: pythonic calls in <|tool_call_start|>
    pythonic.LLAMA32,  # Llama 3.2 pythonic calls: [func_name1(params_name1=… and <|eot_id|>
    pythonic.LLAMA4,  # Llama 4 pythonic calls: [func_name1(param1=value1, …)] and <|header_start|>
    llama3_json.LLAMA4,  # Llama 4 JSON calls: "parameters":  and <|header_start|>
    json_list.XLAM,  # xLAM: a JSON list of calls
    json_list.PHI4_MINI,  # Phi-4-mini: functools[ and a JSON list of calls
    llama3_json.FAMILY,  # Llama 3.1-3.3: "parameters":  and <|eot_id|>
    apertus.FAMILY,  # Apertus: <|tools_prefix|>[{NAME: {…}}]<|tools_suffix|>
    internlm.FAMILY,  # InternLM2: <|action_start|><|plugin|> and a JSON call
    seed_oss.FAMILY,  # Seed-OSS: <seed:tool_call> (Qwen3's XML calls)
    step3p5.FAMILY,  # Step-3.5/3.7: a tool_response turn (Qwen3's XML calls)
    qwen_xml.NEMOTRON_V3,  # Nemotron 3: truncate_history_thinking (Qwen3's XML calls)
    qwen_xml.FAMILY,  # Qwen3.5/3.6, Qwen3-Coder: <function= / <parameter=
    granite.FAMILY,  # Granite 4.0: hermes JSON calls in <|start_of_role|> turns
    hermes.HERMES,  # Qwen2.5/Qwen3 and any other template
    hermes.NONE,  # --tool-call-parser none (never detected)
)
# vLLM parser names that pick a format of their own, not a template family (gateway.formats.mistral.format).
OWN_FORMATS = ("mistral",)


def tool_parser_names() -> tuple[str, ...]:
    """`--tool-call-parser` choices: auto (read the template), each family's vLLM names, the own formats'."""
    return tuple(dict.fromkeys(["auto", *(n for f in FAMILIES for n in f.tool_parsers), *OWN_FORMATS]))


def reasoning_parser_names() -> tuple[str, ...]:
    """`--reasoning-parser` choices: auto, none (reasoning is text), the families' vLLM names, the own formats'."""
    return tuple(dict.fromkeys(["auto", "none", *(n for f in FAMILIES for n in f.reasoning_parsers), *OWN_FORMATS]))


def by_tool_parser(name: str) -> Family:
    """The family vLLM's `--tool-call-parser` name picks."""
    for family in FAMILIES:
        if name in family.tool_parsers:
            return family
    raise ValueError(f"unknown tool parser {name!r}; expected one of {', '.join(tool_parser_names())}")


def of_template(template: str) -> Family:
    """The family whose markup the chat template writes (hermes when none other's)."""
    return next(family for family in FAMILIES if family.detect(template))


def of_model_type(model_type: str | None) -> Family | None:
    """The family a config.json `model_type` names (models that ship no chat template)."""
    return next((family for family in FAMILIES if model_type in family.model_types), None)
