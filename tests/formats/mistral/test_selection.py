"""Which format a Mistral model gets: Mistral's encoder when the model ships `tekken.json` (as vLLM's
`--tokenizer-mode auto` picks Mistral's tokenizer then), or when vLLM's `mistral` parser names are given."""

from __future__ import annotations

import json
import shutil

import pytest

from gateway.formats import load_format
from gateway.formats.mistral._parser import MistralToolCallParser
from gateway.formats.mistral.format import MistralFormat
from tests.support.mistral import tekken_file


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("devstral")
    shutil.copy(tekken_file("v13") / "tekken.json", path / "tekken.json")
    (path / "config.json").write_text(json.dumps({"model_type": "mistral", "architectures": ["MistralForCausalLM"]}))
    return path


@pytest.mark.parametrize(("chat_format", "tool_parser", "reasoning_parser"), [
    ("auto", "auto", "auto"),  # tekken.json beside config.json
    ("auto", "mistral", "mistral"),
    ("auto", "mistral", "auto"),
    ("mistral", "auto", "auto"),
])
def test_a_tekken_model_gets_mistral_s_encoder(model_dir, chat_format, tool_parser, reasoning_parser):
    fmt = load_format(str(model_dir), chat_format=chat_format, tool_parser=tool_parser,
                      reasoning_parser=reasoning_parser)
    assert isinstance(fmt, MistralFormat) and fmt.version.value == "v13"
    assert type(fmt.parser()) is MistralToolCallParser
    assert fmt.stop_token_ids == [2]


def test_the_tokenizer_option_points_at_the_tekken_file(model_dir, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mistral"}))
    fmt = load_format(str(tmp_path), tokenizer=str(model_dir))
    assert isinstance(fmt, MistralFormat)


def test_mistral_names_without_a_tekken_file_say_what_is_missing(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    with pytest.raises(ValueError, match="tekken.json"):
        load_format(str(tmp_path), tool_parser="mistral")
