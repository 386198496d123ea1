"""POST /v1/responses/input_tokens (OpenAI's `TokenCountsBody` → `TokenCountsResource`, through the
real openai SDK's `responses.input_tokens.count`) and /v1/messages/count_tokens (the anthropic SDK's
`messages.count_tokens`): the length of the prompt the gateway would send for that body — a
continuing session's exact tokens spliced in, images as vLLM expands them — equal to the prompt
tokens the real turn then reports; nothing is sent upstream.
"""

from __future__ import annotations

import base64
import io

import anthropic
import httpx
import pytest
from PIL import Image as PILImage
from transformers import Qwen2VLImageProcessorPil

from tests.support.fake_vllm import Script
from tests.support.qwen3_tokens import IM_END, ids
from tests.support.stack import fake_stack
from tests.support.vision import PREPROCESSOR, vision_model_dir

MODEL = "tiny-qwen3"
GENERATE = "/inference/v1/generate"


def spelled(tokenizer, text: str) -> list[int]:
    """`text` one character per token: longer than its canonical tokenization, so a prompt that
    splices these ids and one that renders the text again differ in length."""
    return [t for ch in text for t in ids(tokenizer, ch)]


def test_the_count_is_the_prompt_a_continuing_responses_session_sends(stack, fake, tokenizer):
    client = stack.client()
    output = spelled(tokenizer, "Hello, world!") + [IM_END]
    fake.queue(Script(output))
    history = [{"role": "user", "content": "hi"}]
    first = client.responses.create(model=MODEL, input=history, prompt_cache_key="count-session")
    prompt = fake.bodies(GENERATE)[-1]["token_ids"]
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"role": "user", "content": "again"})
    sent = len(fake.requests)
    counted = client.responses.input_tokens.count(model=MODEL, input=history,
                                                  extra_body={"prompt_cache_key": "count-session"})
    assert counted.object == "response.input_tokens"
    assert len(fake.requests) == sent  # counting sends nothing
    fake.queue(Script(ids(tokenizer, "ok") + [IM_END]))
    second = client.responses.create(model=MODEL, input=history, prompt_cache_key="count-session")
    sent_prompt = fake.bodies(GENERATE)[-1]["token_ids"]
    assert sent_prompt[:len(prompt) + len(output)] == prompt + output  # the session's exact ids, spliced
    assert counted.input_tokens == len(sent_prompt) == second.usage.input_tokens
    fresh = client.responses.input_tokens.count(input=history)  # no session: the history rendered afresh
    assert fresh.input_tokens < counted.input_tokens  # "Hello, world!" is 4 tokens written canonically, not 13


def test_the_count_endpoint_takes_openais_body_only(stack):
    response = httpx.post(stack.url + "/v1/responses/input_tokens",
                          json={"model": MODEL, "input": "hi", "stream": True}, timeout=10)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unsupported_parameter"
    assert response.json()["error"]["param"] == "stream"


def test_count_tokens_is_the_prompt_a_continuing_claude_code_session_sends(stack, fake, tokenizer):
    sdk = anthropic.Anthropic(base_url=stack.url, api_key="dummy", max_retries=0,
                              default_headers={"x-claude-code-session-id": "count-claude"})
    output = spelled(tokenizer, "Hello, world!") + [IM_END]
    fake.queue(Script(output))
    history = [{"role": "user", "content": "hi"}]
    first = sdk.messages.create(model=MODEL, max_tokens=64, system="Be brief.", messages=history)
    history += [{"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
                {"role": "user", "content": "again"}]
    counted = sdk.messages.count_tokens(model=MODEL, system="Be brief.", messages=history)
    fake.queue(Script(ids(tokenizer, "ok") + [IM_END]))
    second = sdk.messages.create(model=MODEL, max_tokens=64, system="Be brief.", messages=history)
    sent_prompt = fake.bodies(GENERATE)[-1]["token_ids"]
    assert counted.input_tokens == len(sent_prompt)
    assert counted.input_tokens == second.usage.input_tokens + second.usage.cache_read_input_tokens


def png(width: int, height: int) -> PILImage.Image:
    return PILImage.new("RGB", (width, height), (255, 0, 0))


def data_url(image: PILImage.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def hf_tokens(image: PILImage.Image) -> int:
    """What the model's own Hugging Face processor (the one vLLM runs) makes of the image."""
    processor = Qwen2VLImageProcessorPil(**{k: v for k, v in PREPROCESSOR.items() if k != "image_processor_type"})
    grid = processor(images=[image], return_tensors="np")["image_grid_thw"][0]
    return int(grid.prod()) // PREPROCESSOR["merge_size"] ** 2


@pytest.fixture(scope="module")
def vision():
    image = png(300, 200)
    with fake_stack(vision_model_dir(), served_model_name="vl",
                    fake={"model": "vl", "image_tokens": hf_tokens(image)}) as running:
        yield running, image


def test_an_image_counts_as_vllm_expands_it(vision):
    stack, image = vision
    body = {"model": "vl", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "What is this?"}, {"type": "input_image", "image_url": data_url(image)}]}]}
    counted = httpx.post(stack.url + "/v1/responses/input_tokens", json=body, timeout=60).json()
    tokenizer = stack.runtime.format.tokenizer
    stack.fake.queue(Script(tokenizer.encode("Red.", add_special_tokens=False) + [248046]))
    answer = httpx.post(stack.url + "/v1/responses", json=body, timeout=60).json()
    [sent] = stack.fake.bodies(GENERATE)
    assert counted == {"object": "response.input_tokens",
                       "input_tokens": len(sent["token_ids"]) - 1 + hf_tokens(image)}
    assert counted["input_tokens"] == answer["usage"]["input_tokens"]
