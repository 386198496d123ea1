"""Forced calls exist only where the gateway has a grammar in the family's own call syntax
(Qwen3's JSON, Qwen3.6's XML). Elsewhere a grammar would force Qwen3's markup on a model whose
parser reads another, so forcing is a 400 — while a JSON answer, which has no call syntax, is
still constrained."""

from __future__ import annotations

import json

import pytest

from gateway.core.conversation import Tool
from gateway.core.errors import APIError
from gateway.core.sampling import OutputConstraint

TOOLS = [Tool(name="get_weather", description="", parameters={"type": "object", "properties": {
    "city": {"type": "string"}}, "required": ["city"]})]
FAMILIES = ["glm_format", "deepseek_format", "kimi_format", "minimax_format", "deepseek_v4_format",
            "llama3_format", "seed_oss_format", "llama4_format", "olmo3_format", "lfm2_format",
            "llama4_json_format", "xlam_format", "phi4_mini_format", "llama32_format", "internlm2_format",
            "apertus_format", "kimi_k3_format"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("constraint", [OutputConstraint(tool_choice="required"),
                                        OutputConstraint(tool_choice="get_weather"),
                                        OutputConstraint(allowed_tools=("get_weather",))])
def test_forcing_a_call_without_the_familys_grammar_is_a_400(family, constraint, request):
    chat_format = request.getfixturevalue(family)
    with pytest.raises(APIError) as refused:
        chat_format.structured_outputs(constraint, TOOLS)
    assert (refused.value.status, refused.value.param, refused.value.code) == (400, "tool_choice", "unsupported_value")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_json_answer_is_constrained_without_any_call_markup(family, request):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    # Kimi-K3 reasons first unless told not to, and its reasoning ends with a tag of several tokens
    thinking = family != "kimi_k3_format"
    fields = request.getfixturevalue(family).structured_outputs(OutputConstraint(answer_schema=schema), TOOLS,
                                                                thinking=thinking)
    tag = json.loads(fields["structural_tag"])
    text = json.dumps(tag)
    assert json.dumps(schema)[1:-1] in text  # the answer's schema is in the grammar
    assert '"name": ' not in text  # and no Qwen3-style call body is


def test_a_json_answer_is_refused_while_kimi_k3_reasons(kimi_k3_format):
    """Its prompt opens the `think` tag, whose end is three tokens no grammar here can wait for: a grammar from
    the first token would force the answer into the reasoning."""
    schema = {"type": "object"}
    with pytest.raises(APIError) as refused:
        kimi_k3_format.structured_outputs(OutputConstraint(answer_schema=schema), TOOLS)
    assert (refused.value.status, refused.value.code) == (400, "unsupported_value")
