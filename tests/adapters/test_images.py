"""Images through every API to the replica, over the scripted fake vLLM: what reaches vLLM is the
token ids with one unexpanded placeholder per image and the images as `content_parts` on
/inference/v1/generate, in order; usage counts vLLM's expanded prompt; every refusal is a clear
error in the API's shape; Codex's catalog offers images for a vision model only."""

from __future__ import annotations

import base64
import io

import httpx
import pytest
from PIL import Image as PILImage

from gateway.core.vision import PatchGrid
from tests.support.fake_vllm import Script
from tests.support.stack import fake_stack
from tests.support.vision import vision_model_dir

GENERATE = "/inference/v1/generate"
VISION_START, VISION_END, IMAGE_PAD, THINK_END, IM_END = 248053, 248054, 248056, 248069, 248046
EXPANDED = 77  # what the fake vLLM expands each placeholder to


def png(width: int = 300, height: int = 200, color=(255, 0, 0)) -> str:
    buffer = io.BytesIO()
    PILImage.new("RGB", (width, height), color).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


RED, BLUE = png(), png(64, 64, (0, 0, 255))


@pytest.fixture(scope="module")
def stack():
    with fake_stack(vision_model_dir(), served_model_name="vl", fake={"model": "vl", "image_tokens": EXPANDED},
                    max_images=3, max_image_bytes=200_000) as stack:
        yield stack


@pytest.fixture(scope="module")
def answer(stack):
    tokenizer = stack.runtime.format.tokenizer
    return [THINK_END, *tokenizer.encode("\n\nA red square.", add_special_tokens=False), IM_END]


def post(stack, path: str, body: dict) -> httpx.Response:
    return httpx.post(stack.url + path, json={"model": "vl", **body}, timeout=60)


def sent(fake) -> dict:
    [body] = fake.bodies(GENERATE)
    return body


def placeholders(body: dict) -> list[int]:
    ids = body["token_ids"]
    return [i for i, t in enumerate(ids) if t == IMAGE_PAD]


def test_a_responses_input_image_reaches_vllm_as_one_placeholder_and_a_content_part(stack, fake, answer):
    fake.queue(Script(answer))
    response = post(stack, "/v1/responses", {"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": RED, "detail": "high"}, {"type": "input_text", "text": "What is it?"}]}]})
    assert response.status_code == 200, response.text
    body = sent(fake)
    assert body["content_parts"] == [{"type": "image_url", "url": RED}]
    [at] = placeholders(body)
    assert body["token_ids"][at - 1:at + 2] == [VISION_START, IMAGE_PAD, VISION_END]
    assert body["token_ids"] == stack.runtime.format.tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}],
        tokenize=True, add_generation_prompt=True, return_dict=False)
    usage = response.json()["usage"]
    assert usage["input_tokens"] == len(body["token_ids"]) + EXPANDED - 1  # vLLM's expanded count
    assert response.json()["output"][-1]["content"][0]["text"] == "A red square."


def test_codex_view_image_output_carries_the_image_and_the_next_turn_is_exact(stack, fake, answer):
    """Codex's view_image answers with a function_call_output whose output array holds the image; the
    next turn continues the exact ids (one placeholder still) and sends every image again, in order."""
    tokenizer = stack.runtime.format.tokenizer
    call = [*tokenizer.encode("\n\n", add_special_tokens=False), 248058,
            *tokenizer.encode("\n<function=view_image>\n<parameter=path>\nshot.png\n</parameter>\n</function>\n",
                              add_special_tokens=False), 248059, IM_END]
    tools = [{"type": "function", "name": "view_image", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]
    first_input = [{"role": "user", "content": [{"type": "input_image", "image_url": BLUE},
                                                {"type": "input_text", "text": "Look at shot.png too."}]}]
    fake.queue(Script([THINK_END, *call]))
    first = post(stack, "/v1/responses", {"input": first_input, "tools": tools, "prompt_cache_key": "s1"}).json()
    first_body = sent(fake)
    [item] = [i for i in first["output"] if i["type"] == "function_call"]
    fake.reset()
    fake.queue(Script(answer))
    output = {"type": "function_call_output", "call_id": item["call_id"], "output": [
        {"type": "input_text", "text": "shot.png"}, {"type": "input_image", "image_url": RED}]}
    second = post(stack, "/v1/responses", {"input": [*first_input, item, output], "tools": tools,
                                           "prompt_cache_key": "s1"})
    assert second.status_code == 200, second.text
    body = sent(fake)
    assert body["content_parts"] == [{"type": "image_url", "url": BLUE}, {"type": "image_url", "url": RED}]
    assert len(placeholders(body)) == 2
    generated = [THINK_END, *call]
    assert body["token_ids"][:len(first_body["token_ids"]) + len(generated)] == first_body["token_ids"] + generated


def test_a_chat_image_url_part(stack, fake, answer):
    fake.queue(Script(answer))
    response = post(stack, "/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Describe"}, {"type": "image_url", "image_url": {"url": RED, "detail": "low"}}]}]})
    assert response.status_code == 200, response.text
    assert sent(fake)["content_parts"] == [{"type": "image_url", "url": RED}]
    assert response.json()["usage"]["prompt_tokens"] == len(sent(fake)["token_ids"]) + EXPANDED - 1


def test_anthropic_image_blocks_in_a_message_and_a_tool_result(stack, fake, answer):
    """Claude Code's pasted screenshot (a base64 block) and its Read tool on a PNG (a tool_result image)."""
    fake.queue(Script(answer))
    data = RED.split(",", 1)[1]
    blue = BLUE.split(",", 1)[1]
    response = post(stack, "/v1/messages", {"max_tokens": 50, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": data}},
                                     {"type": "text", "text": "Open shot.png"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read",
                                           "input": {"file_path": "shot.png"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": blue}}]}]}]})
    assert response.status_code == 200, response.text
    body = sent(fake)
    assert body["content_parts"] == [{"type": "image_url", "url": RED}, {"type": "image_url", "url": BLUE}]
    assert len(placeholders(body)) == 2
    assert response.json()["usage"]["input_tokens"] == len(body["token_ids"]) + 2 * (EXPANDED - 1)


@pytest.mark.parametrize(("part", "status", "code"), [
    ({"type": "input_image", "file_id": "file-abc"}, 400, "unsupported_image_file"),
    ({"type": "input_image", "image_url": "https://example.com/cat.png"}, 400, "unsupported_image_url"),
    ({"type": "input_image", "image_url": "data:image/png;base64,AAAA"}, 400, "invalid_image"),
    ({"type": "input_image", "image_url": "data:image/png;base64," + base64.b64encode(b"GIF89a?").decode()},
     400, "invalid_image"),
])
def test_refusals(stack, fake, part, status, code):
    response = post(stack, "/v1/responses", {"input": [{"role": "user", "content": [part]}]})
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert fake.bodies(GENERATE) == []


def _noise_png(width: int, height: int) -> str:
    import random
    rng = random.Random(0)
    image = PILImage.frombytes("RGB", (width, height), bytes(rng.getrandbits(8) for _ in range(width * height * 3)))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_limits(stack, fake):
    big = post(stack, "/v1/responses", {"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": _noise_png(300, 300)}]}]})
    assert (big.status_code, big.json()["error"]["code"]) == (413, "image_too_large")
    many = post(stack, "/v1/responses", {"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": RED}] * 4}]})
    assert (many.status_code, many.json()["error"]["code"]) == (400, "too_many_images")
    assert fake.bodies(GENERATE) == []


def test_an_image_in_an_assistant_message_is_refused(stack, fake):
    response = post(stack, "/v1/responses", {"input": [{"role": "assistant", "content": [
        {"type": "input_image", "image_url": RED}]}, {"role": "user", "content": "hi"}]})
    assert response.status_code == 400 and response.json()["error"]["param"] == "input[0].content[0]"


def test_the_codex_catalog_offers_images_for_a_vision_model(stack, qwen_tokenizer_dir):
    models = httpx.get(stack.url + "/v1/models", params={"client_version": "0.169.0"}).json()["models"]
    assert models[0]["input_modalities"] == ["text", "image"]
    with fake_stack(qwen_tokenizer_dir) as text_only:
        models = httpx.get(text_only.url + "/v1/models", params={"client_version": "0.169.0"}).json()["models"]
        assert models[0]["input_modalities"] == ["text"]
        response = httpx.post(text_only.url + "/v1/responses", timeout=60, json={"model": "tiny-qwen3", "input": [
            {"role": "user", "content": [{"type": "input_image", "image_url": RED}]}]})
        assert response.status_code == 400 and "accepts text only" in response.json()["error"]["message"]


def test_a_completions_only_replica_is_not_sent_images(vision_completions_stack):
    stack = vision_completions_stack
    response = post(stack, "/v1/responses", {"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": RED}]}]})
    assert (response.status_code, response.json()["error"]["code"]) == (400, "images_need_generate")
    assert stack.fake.bodies("/v1/completions") == []


@pytest.fixture
def vision_completions_stack():
    with fake_stack(vision_model_dir(), served_model_name="vl",
                    fake={"model": "vl", "enable_scale_out": False}) as stack:
        yield stack


def test_a_rollout_records_its_images_and_the_trainers_get_them(stack, fake, answer):
    """Two calls of one episode: each image once, its placeholder's offset in the unexpanded tokens, the
    tokens it expands to; verl's `multi_modal_data` and slime's `multimodal_inputs` carry them in order."""
    fake.queue(Script(answer), Script(answer))
    post(stack, "/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": BLUE}}, {"type": "text", "text": "and?"}]}], "rollout_id": "mm"})
    first = fake.bodies(GENERATE)[0]
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": BLUE}},
                                             {"type": "text", "text": "and?"}]},
                {"role": "assistant", "content": "A red square."},
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": RED}}]}]
    post(stack, "/v1/chat/completions", {"messages": messages, "rollout_id": "mm"})
    second = fake.bodies(GENERATE)[1]
    turns = httpx.get(stack.url + "/v1/rollouts/mm").json()["turns"]
    assert [[(i["url"], i["placeholder"]) for i in t["images"]] for t in turns] == [
        [(BLUE, placeholders(first)[0])], [(BLUE, placeholders(second)[0]), (RED, placeholders(second)[1])]]
    grid = PatchGrid(patch_size=16, min_pixels=65536, max_pixels=16777216)  # the stand-in's preprocessor config
    assert [i["tokens"] for i in turns[1]["images"]] == [grid.tokens(64, 64), grid.tokens(300, 200)]
    [verl] = httpx.get(stack.url + "/v1/rollouts/mm", params={"format": "verl"}).json()["data"]
    assert verl["multi_modal_data"] == {"image": [BLUE, RED]}
    sequence = verl["prompt_ids"] + verl["response_ids"]  # the second image came in the second call's prompt delta
    assert [sequence[i["placeholder"]] for i in verl["extra_fields"]["images"]] == [IMAGE_PAD, IMAGE_PAD]
    [slime] = httpx.get(stack.url + "/v1/rollouts/mm", params={"format": "slime"}).json()["data"]
    assert slime["multimodal_inputs"] == {"images": [BLUE, RED]}


def test_a_rollout_exports_the_prompt_ids_as_vllm_expanded_them(stack, fake, answer):
    """The gateway asks vLLM for its expanded prompt (`return_token_ids`) when it sends images: each
    image's placeholder in the export becomes the ids vLLM put in its place, and counts as many tokens."""
    fake.image_token_id = IMAGE_PAD
    try:
        fake.queue(Script(answer), Script(answer))
        first = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": BLUE}},
                                              {"type": "text", "text": "and?"}]}]
        post(stack, "/v1/chat/completions", {"messages": first, "rollout_id": "mm-expanded", "stream": True})
        post(stack, "/v1/chat/completions", {"messages": [*first, {"role": "assistant", "content": "A red square."}, {
            "role": "user", "content": [{"type": "image_url", "image_url": {"url": RED}}]}], "rollout_id": "mm-expanded"})
    finally:
        fake.image_token_id = None
    bodies = fake.bodies(GENERATE)
    assert [body["return_token_ids"] for body in bodies] == [True, True]
    rollout = httpx.get(stack.url + "/v1/rollouts/mm-expanded").json()
    ids, at = rollout["token_ids"], [i["placeholder"] for i in rollout["turns"][1]["images"]]
    assert ids[:len(bodies[1]["token_ids"])] == bodies[1]["token_ids"] and [ids[i] for i in at] == [IMAGE_PAD] * 2
    assert rollout["expanded_token_ids"] == (ids[:at[0]] + [IMAGE_PAD] * EXPANDED + ids[at[0] + 1:at[1]]
                                             + [IMAGE_PAD] * EXPANDED + ids[at[1] + 1:])
    assert [[i["tokens"] for i in turn["images"]] for turn in rollout["turns"]] == [[EXPANDED], [EXPANDED] * 2]
    # each image's expansion is kept once: by the call that added it to the sequence
    assert [["expansion" in i for i in turn["images"]] for turn in rollout["turns"]] == [[True], [False, True]]


def test_without_vllms_expansion_the_export_has_no_expanded_ids(stack, fake, answer):
    """A replica that does not report it (an older vLLM): the rollout says so rather than guess."""
    fake.queue(Script(answer))
    post(stack, "/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": BLUE}}]}], "rollout_id": "mm-unexpanded"})
    rollout = httpx.get(stack.url + "/v1/rollouts/mm-unexpanded").json()
    assert rollout["expanded_token_ids"] is None and "expansion" not in rollout["turns"][0]["images"][0]


DROPS_IMAGES = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}{{ m.content }}"
                "{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}"
                "{% endif %}<|im_end|>\n{% endfor %}<|im_start|>assistant\n")


@pytest.mark.parametrize(("image_markup", "written"), [("", 0), ("<|image_pad|><|image_pad|>", 2)])
def test_a_template_that_does_not_write_one_placeholder_per_image_is_refused(tmp_path, image_markup, written):
    """vLLM silently misplaces images then (two placeholders, one image: a corrupt prompt; none: a 500):
    the gateway counts before sending."""
    import json
    import shutil

    for path in vision_model_dir().iterdir():
        shutil.copy2(path, tmp_path / path.name)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["chat_template"] = DROPS_IMAGES.replace("{% if p.type == 'text' %}",
                                                   f"{{% if p.type == 'image' %}}{image_markup}{{% endif %}}"
                                                   "{% if p.type == 'text' %}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    with fake_stack(tmp_path, served_model_name="vl", fake={"model": "vl"}) as stack:
        response = post(stack, "/v1/responses", {"input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": RED}, {"type": "input_text", "text": "?"}]}]})
        assert (response.status_code, response.json()["error"]["code"]) == (400, "image_placeholder_mismatch")
        assert f"wrote {written} image placeholders" in response.json()["error"]["message"]
        assert stack.fake.bodies(GENERATE) == []


def test_the_context_check_counts_each_image_as_vllm_will_expand_it():
    """A 300×200 image is 70 tokens on a Qwen3.6 grid (patch 16, merge 2, smart_resize): the prompt's
    ids fit a 64-token context, the expanded prompt does not."""
    grid = PatchGrid(patch_size=16, min_pixels=65536, max_pixels=16777216)
    with fake_stack(vision_model_dir(), served_model_name="vl", fake={"model": "vl", "max_model_len": 64}) as stack:
        text_only = post(stack, "/v1/responses", {"input": "?", "max_output_tokens": 1})
        unexpanded = len(stack.fake.bodies(GENERATE)[0]["token_ids"]) if text_only.status_code == 200 else None
        stack.fake.reset()
        response = post(stack, "/v1/responses", {"max_output_tokens": 1, "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": RED}, {"type": "input_text", "text": "?"}]}]})
        assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"
        needed = int(response.json()["error"]["message"].split("needs ")[1].split(" ")[0])
        # the text-only prompt, the image's <|vision_start|>, placeholder and <|vision_end|>, its expansion
        assert unexpanded is not None and needed == unexpanded + 3 + grid.tokens(300, 200) - 1
        assert unexpanded + 3 < 64 < needed
        assert stack.fake.bodies(GENERATE) == []
