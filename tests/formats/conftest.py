from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def qwen_tokenizer(tokenizer):
    return tokenizer

