"""The family registry is the one place a family is named: the CLI's parser choices, the format's
parser names and template detection all read it, so adding a family is a module and a line."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from gateway.formats import _hermes as hermes
from gateway.formats import families
from gateway.formats._family import Family
from gateway.formats.hf.format import HFChatFormat
from gateway.ops._flags import add_gateway_args


def _choices(flag: str) -> list[str]:
    parser = argparse.ArgumentParser()
    add_gateway_args(parser)
    return next(a.choices for a in parser._actions if flag in a.option_strings)


def test_the_cli_choices_are_the_registrys():
    names = {n for f in families.FAMILIES for n in f.tool_parsers}
    assert set(_choices("--tool-call-parser")) == {"auto", *names, *families.OWN_FORMATS}
    reasoning = {n for f in families.FAMILIES for n in f.reasoning_parsers}
    assert set(_choices("--reasoning-parser")) == {"auto", "none", *reasoning, *families.OWN_FORMATS}


def test_every_vllm_name_picks_exactly_one_family():
    names = [n for f in families.FAMILIES for n in f.tool_parsers]
    assert len(names) == len(set(names))
    assert all(families.by_tool_parser(n).name == f.name for f in families.FAMILIES for n in f.tool_parsers)
    with pytest.raises(ValueError, match="unknown tool parser 'no_such'"):
        families.by_tool_parser("no_such")


@pytest.mark.parametrize(("template", "name"), [
    ("{{ '<minimax:tool_call>' }}", "minimax"),
    ("{{ '<｜DSML｜ calls>' }}", "dsml_v41"),
    ("{{ '<｜DSML｜tool_calls>' }}", "dsml_v4"),
    ("{{ '<｜DSML｜function_calls>' }}", "dsml_v32"),
    ("{{ '<|tool_call>call:' }}", "gemma4"),
    ("{{ '<arg_key>' }}", "glm"),
    ("{{ '<｜tool▁calls▁begin｜>' }}", "deepseek"),
    ("{{ '<|tool_calls_section_begin|>' }}", "kimi"),
    ("{{ '<|open|>' + tag }}{{ '<|end_of_msg|>' }}", "kimi_k3"),
    ('{{ \'"parameters": \' }}<|eot_id|>', "llama3_json"),
    ("{{ '<function=' }}", "xml"),
    ("{{ truncate_history_thinking }}{{ '<function=' }}", "nemotron_v3"),
    ("{{ '<|start_of_role|>' }}{{ '<tool_call>' }}", "granite4"),
    ("{{ '<tool_call>' }}", "hermes"),
    ("", "hermes"),
])
def test_a_template_is_read_by_the_registrys_order(template, name):
    assert families.of_template(template).name == name


def test_a_family_added_to_the_registry_is_detected_and_named_by_the_cli(tokenizer, monkeypatch):
    """The one-line addition: a family declared and registered is picked from its template's marker and by
    its vLLM name, with its own stop tokens, and the CLI offers its names — nothing else edited."""
    marker = "{# toy-family #}"
    toy = dataclasses.replace(hermes.HERMES, name="toy", tool_parsers=("toy_parser",), reasoning_parsers=("toy_r",),
                              detect=lambda template: marker in template, grammar="none")
    monkeypatch.setattr(families, "FAMILIES", (toy, *families.FAMILIES))
    assert "toy_parser" in _choices("--tool-call-parser") and "toy_r" in _choices("--reasoning-parser")
    plain = HFChatFormat(tokenizer)
    assert plain.tool_calls == "hermes"
    monkeypatch.setattr(tokenizer, "chat_template", marker + tokenizer.chat_template)
    assert HFChatFormat(tokenizer).tool_calls == "toy"
    assert HFChatFormat(tokenizer, tool_parser="toy_parser", reasoning_parser="toy_r").family is toy


def test_the_template_family_keeps_its_turns_whichever_parser_reads(glm_tokenizer):
    """GLM's turn tokens are its template's: with the hermes parser named, they still end turns."""
    glm = families.of_template(glm_tokenizer.chat_template)
    fmt = HFChatFormat(glm_tokenizer, tool_parser="hermes")
    assert (fmt.tool_calls, glm.name) == ("hermes", "glm")
    vocab = glm_tokenizer.get_vocab()
    assert fmt.turn_openers == frozenset(vocab[t] for t in glm.turns.openers)


def test_each_declaration_is_a_family():
    assert all(isinstance(f, Family) for f in families.FAMILIES)
    assert families.FAMILIES[-2] is hermes.HERMES  # detects any template: after every specific one

