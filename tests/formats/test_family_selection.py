"""Which format a family's model dir gets: its parser read off the chat template (`auto`) or named by
vLLM's parser names, with its stop ids; the names the CLI takes; a vocabulary without a family's
tokens refused; without parsers, a family's markup is text. One table a question, a row a family (a
family's own selection file keeps only what is its own: tests/formats/dsml/test_selection.py,
tests/formats/mistral/test_selection.py)."""

from __future__ import annotations

import pytest

from gateway.formats import detect_format, load_format
from gateway.formats._deepseek import DeepSeekToolCallParser
from gateway.formats._gemma4 import Gemma4Parser
from gateway.formats._glm import GlmToolCallParser
from gateway.formats._invoke import InvokeToolCallParser
from gateway.formats._kimi import KimiToolCallParser
from gateway.formats._minimax import MiniMaxToolCallParser
from gateway.formats._xml_calls import XmlToolCallParser
from gateway.formats.hf.parser import HermesOutputParser
from gateway.ops._flags import build_parser
from gateway.ops.qwen_tokenizer import qwen_tokenizer_dir
from tests.support import deepseek, deepseek_v4, gemma4, glm, kimi, minimax, qwen36

DEEPSEEK, DEEPSEEK_V4, DEEPSEEK_V41 = (deepseek.deepseek_tokenizer_dir, deepseek_v4.deepseek_v4_tokenizer_dir,
                                       deepseek_v4.deepseek_v41_tokenizer_dir)
GLM, GEMMA4, KIMI = glm.glm_tokenizer_dir, gemma4.gemma4_tokenizer_dir, kimi.kimi_tokenizer_dir
MINIMAX, QWEN36 = minimax.minimax_tokenizer_dir, qwen36.qwen36_tokenizer_dir
KIMI_STOPS = [kimi.KNOWN_IDS["[EOS]"], kimi.KNOWN_IDS["<|im_end|>"]]  # [EOS] and generation_config.json's <|im_end|>

PARSERS = [  # (tokenizer dir, chat format, tool parser, reasoning parser, family, parser, stop ids)
    ("deepseek", DEEPSEEK, "hf", "auto", "auto", "deepseek", DeepSeekToolCallParser, deepseek.EOS_IDS),
    ("deepseek", DEEPSEEK, "hf", "deepseek_v31", "deepseek_v3", "deepseek", DeepSeekToolCallParser, deepseek.EOS_IDS),
    ("deepseek", DEEPSEEK, "hf", "deepseek_v31", "deepseek_r1", "deepseek", DeepSeekToolCallParser, deepseek.EOS_IDS),
    ("deepseek", DEEPSEEK, "hf", "none", "none", "none", HermesOutputParser, deepseek.EOS_IDS),
    ("dsml", DEEPSEEK_V41, "hf", "deepseek_v41", "deepseek_v41", "dsml_v41", InvokeToolCallParser, deepseek_v4.EOS_IDS),
    ("dsml", DEEPSEEK_V4, "hf", "deepseek_v4", "deepseek_v4", "dsml_v4", InvokeToolCallParser, deepseek_v4.EOS_IDS),
    ("dsml", DEEPSEEK_V4, "hf", "deepseek_v32", "deepseek_v3", "dsml_v32", InvokeToolCallParser, deepseek_v4.EOS_IDS),
    ("dsml", DEEPSEEK_V4, "hf", "deepseek_v32", "deepseek_r1", "dsml_v32", InvokeToolCallParser, deepseek_v4.EOS_IDS),
    # Gemma 4 as the gateway picks its format (config.json's model_type gemma4: a chat-template model).
    ("gemma4", GEMMA4, "auto", "auto", "auto", "gemma4", Gemma4Parser, gemma4.EOS_IDS),  # <|tool_call>call:
    ("gemma4", GEMMA4, "auto", "gemma4", "gemma4", "gemma4", Gemma4Parser, gemma4.EOS_IDS),
    ("gemma4", GEMMA4, "auto", "none", "none", "none", HermesOutputParser, gemma4.EOS_IDS),
    ("glm", GLM, "hf", "auto", "auto", "glm", GlmToolCallParser, glm.EOS_IDS),  # the template writes <arg_key>
    ("glm", GLM, "hf", "glm45", "glm45", "glm", GlmToolCallParser, glm.EOS_IDS),
    ("glm", GLM, "hf", "glm47", "glm47", "glm", GlmToolCallParser, glm.EOS_IDS),
    ("glm", GLM, "hf", "none", "none", "none", HermesOutputParser, glm.EOS_IDS),
    ("kimi", KIMI, "hf", "auto", "auto", "kimi", KimiToolCallParser, KIMI_STOPS),  # <|tool_calls_section_begin|>
    ("kimi", KIMI, "hf", "kimi_k2", "kimi_k2", "kimi", KimiToolCallParser, KIMI_STOPS),
    ("kimi", KIMI, "hf", "none", "none", "none", HermesOutputParser, KIMI_STOPS),
    ("minimax", MINIMAX, "hf", "auto", "auto", "minimax", MiniMaxToolCallParser, minimax.EOS_IDS),  # <minimax:tool_call>
    ("minimax", MINIMAX, "hf", "minimax_m2", "minimax_m2", "minimax", MiniMaxToolCallParser, minimax.EOS_IDS),
    ("minimax", MINIMAX, "hf", "none", "none", "none", HermesOutputParser, minimax.EOS_IDS),
    ("qwen36", QWEN36, "hf", "auto", "auto", "xml", XmlToolCallParser, qwen36.EOS_IDS),  # <function= / <parameter=
    ("qwen36", QWEN36, "hf", "qwen3_coder", "auto", "xml", XmlToolCallParser, qwen36.EOS_IDS),
    ("qwen36", QWEN36, "hf", "qwen3_xml", "auto", "xml", XmlToolCallParser, qwen36.EOS_IDS),
    ("qwen36", QWEN36, "hf", "hermes", "auto", "hermes", HermesOutputParser, qwen36.EOS_IDS),
    ("qwen36", QWEN36, "hf", "none", "auto", "none", HermesOutputParser, qwen36.EOS_IDS),
    ("qwen3", qwen_tokenizer_dir, "hf", "auto", "auto", "hermes", HermesOutputParser, [151645, 151643]),  # keeps hermes
]


@pytest.mark.parametrize(("directory", "chat_format", "tool_parser", "reasoning_parser", "kind", "parser", "stops"),
                         [pytest.param(*row[1:], id=f"{row[0]}-{row[3]}-{row[4]}") for row in PARSERS])
def test_the_template_or_vllm_s_names_pick_the_parser(directory, chat_format, tool_parser, reasoning_parser, kind,
                                                      parser, stops):
    fmt = load_format(str(directory()), chat_format=chat_format, tool_parser=tool_parser,
                      reasoning_parser=reasoning_parser)
    assert fmt.tool_calls == kind
    assert type(fmt.parser()) is parser
    assert fmt.stop_token_ids == stops  # generation_config.json's, which are the family's turn ends


@pytest.mark.parametrize("directory", list({row[1]: None for row in PARSERS}), ids=lambda d: d.__name__)
def test_each_family_s_model_dir_is_an_hf_model(directory):
    """A chat-template model, or (DeepSeek-V3.2/V4/V4.1) one whose config.json names its encoder."""
    assert detect_format(str(directory())) == "hf"


@pytest.mark.parametrize(("argv", "expected"), [
    pytest.param(["--tool-call-parser", "deepseek_v31", "--reasoning-parser", "deepseek_v3"],
                 {"tool_parser": "deepseek_v31", "reasoning_parser": "deepseek_v3"}, id="deepseek"),
    pytest.param(["--tool-call-parser", "deepseek_v4", "--reasoning-parser", "deepseek_v4"],
                 {"tool_parser": "deepseek_v4", "reasoning_parser": "deepseek_v4"}, id="dsml_v4"),
    pytest.param(["--tool-call-parser", "deepseek_v32"], {"tool_parser": "deepseek_v32"}, id="dsml_v32"),
    pytest.param(["--tool-call-parser", "deepseek_v41", "--reasoning-parser", "deepseek_v41"],
                 {"tool_parser": "deepseek_v41", "reasoning_parser": "deepseek_v41"}, id="dsml_v41"),
    pytest.param(["--tool-call-parser", "gemma4", "--reasoning-parser", "gemma4"],
                 {"tool_parser": "gemma4", "reasoning_parser": "gemma4"}, id="gemma4"),
    pytest.param(["--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2"],
                 {"tool_parser": "kimi_k2", "reasoning_parser": "kimi_k2"}, id="kimi"),
    pytest.param(["--tool-call-parser", "minimax_m2", "--reasoning-parser", "minimax_m2"],
                 {"tool_parser": "minimax_m2", "reasoning_parser": "minimax_m2"}, id="minimax"),
    pytest.param(["--tool-call-parser", "mistral", "--reasoning-parser", "mistral", "--chat-format", "mistral"],
                 {"tool_parser": "mistral", "reasoning_parser": "mistral", "chat_format": "mistral"}, id="mistral"),
])
def test_the_cli_takes_vllm_s_names(argv, expected):
    args = build_parser().parse_args(["serve", *argv])
    assert {name: getattr(args, name) for name in expected} == expected


@pytest.mark.parametrize(("directory", "options", "message"), [
    pytest.param(QWEN36, {"tool_parser": "minimax_m2"}, "<minimax:tool_call>", id="minimax"),
    pytest.param(DEEPSEEK, {"tool_parser": "deepseek_v4"}, "｜DSML｜", id="dsml_v4"),
    # V4.1's encoder writes `<｜System｜>` turns: on V4's vocabulary they would be text the model never saw.
    pytest.param(DEEPSEEK_V4, {"tool_parser": "deepseek_v41"}, "<｜System｜>", id="dsml_v41"),
    pytest.param(DEEPSEEK_V4, {}, "no chat template", id="dsml-without-template-or-model-type"),
    pytest.param(QWEN36, {"tool_parser": "kimi_k2"}, "unknown|lacks", id="qwen36-kimi_k2"),
    pytest.param(QWEN36, {"reasoning_parser": "no_such_parser"}, "unknown|lacks", id="qwen36-no_such_parser"),
    pytest.param(QWEN36, {"tool_parser": "glm45"}, "unknown|lacks", id="qwen36-glm45"),  # no GLM tags in Qwen's
])
def test_a_vocabulary_without_the_family_s_tokens_is_refused(directory, options, message):
    with pytest.raises(ValueError, match=message):
        load_format(str(directory()), chat_format="hf", **options)


@pytest.mark.parametrize(("directory", "written", "texts"), [
    # DeepSeek's markers are not special tokens: they decode to their text, which is what is left.
    pytest.param(DEEPSEEK, "a</think>b<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
                 "<｜tool▁calls▁end｜>", None, id="deepseek"),
    # Special tokens decode to nothing unless a parser reads them: what is left is the text.
    pytest.param(GLM, "\n<think>a</think>\n<tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>",
                 ["a\nf\nk\nv"], id="glm"),
    # Without a reasoning parser, reasoning is text too.
    pytest.param(QWEN36, "a</think>\n\n<tool_call>\n<function=f>\n</function>\n</tool_call>", None, id="qwen36"),
])
def test_without_parsers_the_family_s_markup_is_text(directory, written, texts):
    fmt = load_format(str(directory()), chat_format="hf", tool_parser="none", reasoning_parser="none")
    parser = fmt.parser()
    events = [*parser.feed(fmt.tokenizer.encode(written)), *parser.finish()]
    assert [e.text for e in events if type(e).__name__ == "ItemDone"] == (texts or [written])
