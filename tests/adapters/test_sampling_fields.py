"""Responses and Chat Completions read the shared sampling fields the same way."""

import pytest

from gateway.adapters.chat.input import parse_chat_request
from gateway.adapters.responses.input import parse_request
from gateway.core.errors import APIError

EXTRAS = {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "seed": 7, "presence_penalty": 0.5,
          "frequency_penalty": 0.25, "repetition_penalty": 1.1, "top_logprobs": 3}


def test_both_apis_take_vllm_sampling_extras() -> None:
    responses = parse_request({"model": "m", "input": "hi", "max_output_tokens": 9, "include": ["message.output_text.logprobs"],
                               **EXTRAS}).sampling
    chat = parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9, "logprobs": True,
                               **EXTRAS}).sampling
    assert responses == chat
    assert (chat.max_tokens, chat.min_p, chat.repetition_penalty, chat.logprobs) == (9, 0.05, 1.1, 3)


def test_top_logprobs_without_logprobs() -> None:
    # Chat asks with `logprobs: true` (alternatives without it are a 400, as in vLLM and OpenAI);
    # Responses takes `top_logprobs` alone as the ask.
    with pytest.raises(APIError) as failure:
        parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})
    assert failure.value.param == "top_logprobs"
    assert parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                               "top_logprobs": 0}).sampling.logprobs is None
    assert parse_request({"model": "m", "input": "hi", "top_logprobs": 2}).sampling.logprobs == 2


@pytest.mark.parametrize(("field", "value"), [("temperature", 2.5), ("top_p", -0.1), ("top_logprobs", 21),
                                              ("min_p", "low")])
def test_bad_values_name_the_field(field: str, value: object) -> None:
    for parse, body in ((parse_request, {"model": "m", "input": "hi"}),
                        (parse_chat_request, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})):
        with pytest.raises(APIError) as failure:
            parse({**body, field: value})
        assert failure.value.param == field and failure.value.status == 400
