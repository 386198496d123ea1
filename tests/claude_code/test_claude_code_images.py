"""The real Claude Code CLI reading a PNG with its Read tool, on a vision model (Qwen3.6's vocabulary and
template, a vision_config; a scripted vLLM): the tool_result's image block reaches vLLM as one
placeholder in the exact continued ids and the image as `content_parts`."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image as PILImage

from tests.claude_code.test_claude_code_cli import run_claude
from tests.codex.test_codex_qwen36 import continues, output_ids, xml_call
from tests.support.fake_vllm import Script
from tests.support.stack import fake_stack
from tests.support.vision import vision_model_dir

pytestmark = pytest.mark.claude_code

IMAGE_PAD = 248056


def test_claude_code_reads_a_png_and_the_model_gets_it(claude_code_bin, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(vision_model_dir())
    home = tmp_path / "home"
    home.mkdir()
    shot = home / "shot.png"
    PILImage.new("RGB", (96, 64), (0, 200, 0)).save(shot, "PNG")
    read = output_ids(tokenizer, xml_call("Open the shot.", "Read", {"file_path": str(shot)}), "shot")
    answer = output_ids(tokenizer, "Green.\n</think>\n\nA green rectangle.<|im_end|>", "Green")
    with fake_stack(vision_model_dir(), served_model_name="tiny-qwen3", fake={"image_tokens": 32}) as stack:
        stack.fake.queue(Script(read), Script(answer))
        result = run_claude(claude_code_bin, stack.url, home, "What is in shot.png?", tools="Read")
        first, second = [r.body for r in stack.fake.requests]
    assert result["is_error"] is False and result["result"] == "A green rectangle.", result
    assert "content_parts" not in first
    [part] = second["content_parts"]
    kind, data = part["url"].split(",", 1)
    assert kind in ("data:image/png;base64", "data:image/jpeg;base64") and part["type"] == "image_url"
    pixel = PILImage.open(io.BytesIO(base64.b64decode(data))).convert("RGB").getpixel((10, 10))
    assert all(abs(a - b) <= 3 for a, b in zip(pixel, (0, 200, 0), strict=True))  # the PNG (Claude Code may re-encode)
    assert second["token_ids"].count(IMAGE_PAD) == 1
    assert continues(second["token_ids"], first["token_ids"], read)
