from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def qwen_tokenizer(tokenizer):
    return tokenizer


@pytest.fixture(scope="session")
def qwen_format(qwen_tokenizer):
    from gateway.formats.hf import HFChatFormat

    return HFChatFormat(qwen_tokenizer)
