"""Run in the vLLM virtualenv (it has xgrammar, vLLM's structured-output engine): reads
`{"tokenizer": dir, "vocab_size": n, "stop_ids": [...], "checks": [{"tag": {...}, "cases": [text, ...]}]}`
as JSON on stdin and prints, per check and case, whether the grammar accepts the text's tokens
and is then complete. One process and one tokenizer for all checks (loading one is the cost)."""

from __future__ import annotations

import json
import sys

import xgrammar
from transformers import AutoTokenizer


def main() -> None:
    spec = json.load(sys.stdin)
    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer"])
    info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=spec["vocab_size"],
                                                   stop_token_ids=spec["stop_ids"])
    compiler = xgrammar.GrammarCompiler(info)
    results = []
    for check in spec["checks"]:
        compiled = compiler.compile_structural_tag(check["tag"])
        accepted = []
        for text in check["cases"]:
            matcher = xgrammar.GrammarMatcher(compiled)
            ids = tokenizer.encode(text, add_special_tokens=False)
            accepted.append(all(matcher.accept_token(token) for token in ids) and matcher.is_terminated())
        results.append(accepted)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
