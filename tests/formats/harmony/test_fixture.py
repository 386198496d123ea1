"""The o200k fixture: the published vocabulary, harmony offline, a gpt-oss HF tokenizer."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.o200k import HARMONY_SPECIAL_TOKENS, O200K_SHA256, ensure_harmony_env, harmony_tokenizer_dir


def test_o200k_file_is_the_published_one(o200k_dir: Path) -> None:
    data = (o200k_dir / "o200k_base.tiktoken").read_bytes()
    assert hashlib.sha256(data).hexdigest() == O200K_SHA256
    assert len(data.splitlines()) == 199998


def test_ensure_harmony_env_keeps_an_existing_setting(o200k_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIKTOKEN_ENCODINGS_BASE")
    assert ensure_harmony_env() == o200k_dir
    assert os.environ["TIKTOKEN_ENCODINGS_BASE"] == str(o200k_dir)
    monkeypatch.setenv("TIKTOKEN_ENCODINGS_BASE", "/elsewhere")
    ensure_harmony_env()
    assert os.environ["TIKTOKEN_ENCODINGS_BASE"] == "/elsewhere"


@pytest.fixture(scope="module")
def encoding(o200k_dir: Path):
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


@pytest.fixture(scope="module")
def hf_tokenizer(o200k_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(harmony_tokenizer_dir())


def test_harmony_loads_offline(encoding) -> None:
    assert sorted(encoding.stop_tokens_for_assistant_actions()) == [200002, 200012]
    assert encoding.encode("Hello world") == [13225, 2375]


def test_hf_tokenizer_has_gpt_oss_ids(hf_tokenizer, encoding) -> None:
    assert len(hf_tokenizer) == 201088
    for token_id, token in HARMONY_SPECIAL_TOKENS.items():
        assert hf_tokenizer.convert_tokens_to_ids(token) == token_id
        if token != "<|endofprompt|>":  # openai-harmony names 200018 <|reserved_200018|>
            assert encoding.encode(token, allowed_special={token}) == [token_id]
    assert hf_tokenizer.convert_ids_to_tokens([200000, 200004, 200019, 201087]) == [
        "<|reserved_200000|>", "<|reserved_200004|>", "<|reserved_200019|>", "<|reserved_201087|>"]
    assert hf_tokenizer.eos_token_id == 200002
    # Special tokens in text are recognised, as vLLM's detokenizer needs.
    assert hf_tokenizer.encode("<|start|>assistant<|channel|>", add_special_tokens=False) == [200006, 173781, 200005]


SAMPLES = [
    "Hello world",
    "def f(x):\n    return x ** 2  # square\n\n\n",
    "Ünïcödé — 日本語のテキスト, emoji 🦜🦜 and 𝔘𝔫𝔦 math Ω≈ç√∫",
    "  leading spaces, trailing\t\t\n  ",
    "I'M SHOUTING, you're WHISPERING; they'll see 12345678 numbers.",
    '{"city": "Paris", "days": [1, 2, 3]}',
]


@pytest.mark.parametrize("text", SAMPLES)
def test_hf_tokenizer_encodes_like_harmony(hf_tokenizer, encoding, text: str) -> None:
    ids = encoding.encode(text)
    assert hf_tokenizer.encode(text, add_special_tokens=False) == ids
    assert hf_tokenizer.decode(ids) == text


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=80).filter(lambda t: "<|" not in t))
def test_hf_tokenizer_encodes_any_text_like_harmony(hf_tokenizer, encoding, text: str) -> None:
    # Plain text only: the HF tokenizer (like vLLM) reads special-token text as special tokens.
    assert hf_tokenizer.encode(text, add_special_tokens=False) == encoding.encode(text, disallowed_special=())
