"""Exactness per family: for every chat-template family, rendering only the new items
(`render_tail`, where the locality probe allows it) gives exactly the prompt of the full path
(render everything twice, splice the model's drifted ids), on random agent histories — the
hypothesis test of tests/tokenfix/test_incremental.py, over the families' own templates."""

from __future__ import annotations

import pytest
from hypothesis import given

from tests.tokenfix.test_incremental import SETTINGS, both_ways, continuations

FAMILIES = ["qwen36_format", "glm_format", "deepseek_format", "kimi_format", "deepseek_v4_format",
            "deepseek_v32_format", "minimax_format", "seed_oss_format", "step3p5_format", "llama4_format",
            "olmo3_format", "lfm2_format", "llama4_json_format", "xlam_format", "phi4_mini_format",
            "llama32_format", "granite4_format", "nemotron_v3_format",
            "internlm2_format", "apertus_format", "kimi_k3_format"]


@pytest.mark.parametrize("family", FAMILIES)
@SETTINGS
@given(case=continuations())
async def test_incremental_prompt_equals_full_render_and_splice(request, family, case):
    chat_format = request.getfixturevalue(family)
    _, _, ids, reference = await both_ways(chat_format, case)
    assert ids == reference


@pytest.mark.parametrize(("family", "kinds"), [
    ("qwen36_format", {"tool", "user", "system"}),
    ("glm_format", {"tool", "system"}),
    ("deepseek_format", {"tool", "user"}),  # a later system message joins the system prompt at the top
    ("kimi_format", {"tool", "user", "system"}),
    # DeepSeek's encoders: every system message at the top, too; V4 in thinking mode renders the last query's
    # answers with their thinking, and without it once another query or a tool result (a user turn) follows.
    ("deepseek_v4_format", set()),
    ("deepseek_v32_format", {"tool", "user"}),
    ("minimax_format", {"tool"}),  # a new query drops earlier reasoning; later system messages are queries
])
def test_the_kinds_each_template_renders_alone(request, family, kinds):
    """The locality probe's verdict per family, pinned: which new items take the fast path (the
    test above shows that either path gives the same ids)."""
    assert request.getfixturevalue(family).incremental_kinds == frozenset(kinds)
