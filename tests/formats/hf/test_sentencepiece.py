"""SentencePiece-style BPE tokenizers (`▁` for spaces, `<0xNN>` byte pieces, byte fallback: Gemma's
kind) stream like byte-level ones: each id's bytes, joined, are exactly `tokenizer.decode`'s text, and
a Gemma 4 call written in such ids parses. The tokenizer here is a small one of that kind built with
`tokenizers`, with Gemma 4's control tokens at their ids and the published Gemma 4 template."""

from __future__ import annotations

import random
import string

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

from gateway.formats.hf.format import HFChatFormat
from tests.support.gemma4 import TEMPLATE, control_tokens
from tests.support.parse_events import items


@pytest.fixture(scope="module")
def sentencepiece_format() -> HFChatFormat:
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(control_tokens())}
    vocab.update({f"<0x{b:02X}>": len(vocab) + b for b in range(256)})
    pieces = ["\u2581", *string.ascii_letters, *string.digits, *"{}[]:,.", "\u2581a", "\u2581ab", "ca", "call"]
    vocab.update({piece: len(vocab) + i for i, piece in enumerate(pieces)})
    merges = [("\u2581", "a"), ("\u2581a", "b"), ("c", "a"), ("ca", "l"), ("cal", "l")]
    vocab["cal"] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>"))
    backend.normalizer = normalizers.Replace(" ", "\u2581")
    backend.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    backend.add_tokens([AddedToken(t, normalized=False, special=True) for t in control_tokens()])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>",
                                        pad_token="<pad>", unk_token="<unk>", clean_up_tokenization_spaces=False)
    tokenizer.chat_template = TEMPLATE.read_text()
    return HFChatFormat(tokenizer, extra_eos_ids=[106, 50])


def test_each_id_stands_for_the_bytes_decode_writes(sentencepiece_format):
    tokenizer = sentencepiece_format.tokenizer
    rng = random.Random(7)
    for _ in range(200):
        text = "".join(rng.choice(["ab", " a", " ", "\n", "✓", "é", "call", "x{1}", "日本"]) for _ in range(12))
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert any(256 <= t < 512 for t in ids) or "\n" not in text  # byte pieces are exercised
        assert b"".join(sentencepiece_format.token_bytes(t) for t in ids).decode() == tokenizer.decode(ids) == text


def test_a_gemma4_call_in_sentencepiece_ids_parses(sentencepiece_format):
    tokenizer = sentencepiece_format.tokenizer
    assert sentencepiece_format.tool_calls == "gemma4"
    ids = tokenizer.encode('Ok ✓<|tool_call>call:f{a:<|"|>x y<|"|>,n:1}<tool_call|><|tool_response>',
                           add_special_tokens=False)
    parser = sentencepiece_format.parser()
    assert items([*parser.feed(ids), *parser.finish()]) == [
        ("text", None, "Ok ✓"), ("tool_call", "f", '{"a": "x y", "n": 1}')]
