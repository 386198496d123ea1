"""Which tool-call format a MiniMax-M2 model gets: read off its chat template, or vLLM's parser names."""

from __future__ import annotations

import pytest

from gateway.formats import load_format
from gateway.formats.hf_parser import HermesOutputParser
from gateway.formats.minimax import MiniMaxToolCallParser
from tests.support.minimax import EOS_IDS, minimax_tokenizer_dir
from tests.support.qwen36 import qwen36_tokenizer_dir


@pytest.mark.parametrize(("tool_parser", "reasoning_parser", "kind", "parser"), [
    ("auto", "auto", "minimax", MiniMaxToolCallParser),  # the template writes <minimax:tool_call>
    ("minimax_m2", "minimax_m2", "minimax", MiniMaxToolCallParser),
    ("none", "none", "none", HermesOutputParser),
])
def test_minimax_parsers(tool_parser, reasoning_parser, kind, parser):
    fmt = load_format(str(minimax_tokenizer_dir()), chat_format="hf", tool_parser=tool_parser,
                      reasoning_parser=reasoning_parser)
    assert fmt.tool_calls == kind and type(fmt.parser()) is parser
    assert fmt.stop_token_ids == EOS_IDS


def test_a_vocabulary_without_minimax_s_tokens_is_refused():
    with pytest.raises(ValueError, match="<minimax:tool_call>"):
        load_format(str(qwen36_tokenizer_dir()), chat_format="hf", tool_parser="minimax_m2")


def test_the_cli_takes_vllm_s_minimax_names():
    from gateway.ops.flags import build_parser

    args = build_parser().parse_args(["serve", "--tool-call-parser", "minimax_m2", "--reasoning-parser", "minimax_m2"])
    assert (args.tool_parser, args.reasoning_parser) == ("minimax_m2", "minimax_m2")
