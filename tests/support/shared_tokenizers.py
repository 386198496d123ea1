"""One transformers tokenizer per directory for the whole test session.

Loading one takes seconds (transformers reads tokenizer.json in Python) and holds ~300 MB, so the
session fixtures, the formats `load_format` builds (tests/conftest.py points it here) and the
gateways started in this process share it. Neither the gateway nor a format changes its
tokenizer; a test that must (another template) works on a `copy.deepcopy`.
"""

from __future__ import annotations

import functools
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase


def shared_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    return _load(str(Path(path).resolve()) if Path(path).exists() else str(path))


@functools.cache
def _load(path: str) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(path)
