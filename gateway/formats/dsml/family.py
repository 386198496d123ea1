"""DeepSeek-V3.2, V4 and V4.1 tool calls (DSML): the family's tags for the invoke-block parser (`invoke`).

These models write their calls as a DSML block after their text (V3.2 names it `function_calls`,
V4 `tool_calls`; V4.1 spells every tag with a space after `｜DSML｜`: `<｜DSML｜ calls>`,
`<｜DSML｜ invoke name=…>`, `<｜DSML｜ parameter …>`):

    <｜DSML｜tool_calls>
    <｜DSML｜invoke name="NAME">
    <｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter>
    <｜DSML｜parameter name="N" string="false">5</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls>

then end their turn with `<｜end▁of▁sentence｜>`; V4 and V4.1 (and V3.2 in thinking mode) reason in
`<think>…</think>`, single added tokens. Of the DSML markup only `｜DSML｜` is one (id 128825 in V4's
vocabulary): a tag is structure only where the model wrote that id in it. Values are read as vLLM's
`deepseek_v32` / `deepseek_v4` / `deepseek_v41` parsers read them (`vllm/parser/deepseek_v4.py` `_dsml_arg_converter`: a
`string="true"` value is its text, any other is JSON when it parses, else its text), then typed by
the tool's schema; vLLM's unwrapping of a lone `arguments`/`input` wrapper is not done.
"""

from __future__ import annotations

import functools
import re

from gateway.formats._family import Family, ParserFactory
from gateway.formats._invoke import InvokeToolCallParser, Tags
from gateway.formats.dsml._render import DSML, SYSTEM, TAGS, DsmlEncoder, effort_level

__all__ = ["V4", "V32", "V41"]

MARK = "\ufdd0"  # the `｜DSML｜` id in scanned text


def tags(dsml_id: int, version: str) -> Tags:
    """DSML's tags, the `｜DSML｜` id marked; `version` ("v32", "v4", "v41") names them."""
    block, invoke, parameter = TAGS[version]
    return Tags(marks={dsml_id: MARK}, opener=dsml_id, block_open=f"<{MARK}{block}>", block_close=f"</{MARK}{block}>",
                invoke_open=f'<{MARK}{invoke} name="', invoke_close=f"</{MARK}{invoke}>",
                parameter_open=f"<{MARK}{parameter}", parameter_close=f"</{MARK}{parameter}>",
                parameter=re.compile(f'<{MARK}{re.escape(parameter)}\\s+name="([^"]*)"(?:\\s+string="([^"]*)")?\\s*>'))


def _family(version: str, template: str, reasoning_parsers: tuple[str, ...], needs: tuple[str, ...] = ()) -> Family:
    def parsers(vocab: dict[str, int]) -> ParserFactory:
        invoke_tags = tags(vocab[DSML], version)
        return lambda shared, starts, tools: InvokeToolCallParser(shared.token_bytes, shared.markup, invoke_tags,
                                                                  shared.stop_ids, starts, tools)

    name = f"deepseek_{version}"
    # `｜DSML｜` opens every tag; the parser reads the text around it, so there is no closing marker.
    return Family(name=f"dsml_{version}", tool_parsers=(name,), reasoning_parsers=reasoning_parsers,
                  detect=lambda text: template in text, model_types=(name,),
                  markers={"call_open": DSML, "call_close": None}, needs=(DSML, *needs), parsers=parsers,
                  encoder=lambda tokenizer, thinking, effort: DsmlEncoder(tokenizer, version, thinking, effort),
                  effort=functools.partial(effort_level, version))


V41 = _family("v41", f"{DSML} calls", ("deepseek_v41",), needs=(SYSTEM,))  # V4.1 writes `<｜System｜>` turns
V4 = _family("v4", f"{DSML}tool_calls", ("deepseek_v4",))
V32 = _family("v32", DSML, ())  # after V4: any template writing `｜DSML｜`
