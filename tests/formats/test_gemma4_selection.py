"""Which format a Gemma 4 model dir gets: the chat template's markup, or vLLM's `gemma4` names."""

from __future__ import annotations

import pytest

from gateway.formats import detect_format, load_format
from gateway.formats.gemma4 import Gemma4Parser
from gateway.formats.hf_parser import HermesOutputParser
from tests.support.gemma4 import EOS_IDS, gemma4_tokenizer_dir


@pytest.mark.parametrize(("tool_parser", "reasoning_parser", "kind", "parser"), [
    ("auto", "auto", "gemma4", Gemma4Parser),  # the template writes <|tool_call>call:
    ("gemma4", "gemma4", "gemma4", Gemma4Parser),
    ("none", "none", "none", HermesOutputParser),
])
def test_gemma4_parsers(tool_parser, reasoning_parser, kind, parser):
    directory = str(gemma4_tokenizer_dir())
    assert detect_format(directory) == "hf"  # config.json model_type gemma4: a chat-template model
    fmt = load_format(directory, tool_parser=tool_parser, reasoning_parser=reasoning_parser)
    assert fmt.tool_calls == kind
    assert type(fmt.parser()) is parser
    assert fmt.stop_token_ids == EOS_IDS  # generation_config.json's: <eos>, <turn|>, <|tool_response>


def test_the_flags_accept_vllms_gemma4_names():
    import argparse

    from gateway.ops.flags import add_gateway_args

    parser = argparse.ArgumentParser()
    add_gateway_args(parser)
    args = parser.parse_known_args(["--tool-call-parser", "gemma4", "--reasoning-parser", "gemma4"])[0]
    assert (args.tool_parser, args.reasoning_parser) == ("gemma4", "gemma4")
