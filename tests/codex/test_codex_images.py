"""The real Codex CLI (0.171.0) on a vision model (Qwen3.6's vocabulary and published template, a
config.json with a vision_config; a scripted vLLM): Codex offers `view_image`, the model calls it on
a PNG in the workspace, and the next request carries the image — as a `function_call_output` with an
`input_image`, which the gateway sends to vLLM as one placeholder in the exact continued ids and the
PNG's bytes as `content_parts`. Codex's `-i` attaches an image to the first message the same way."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator

import pytest
from PIL import Image as PILImage

from tests.codex.harness import GENERATE, MODEL, catalog, codex_exec, recorded_gateway
from tests.codex.test_codex_qwen36 import continues, output_ids, xml_call
from tests.support.fake_vllm import Script
from tests.support.vision import vision_model_dir

pytestmark = pytest.mark.codex

IMAGE_PAD = 248056


@pytest.fixture(scope="module")
def qwen36():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(vision_model_dir())


@pytest.fixture
def stack(monkeypatch) -> Iterator:
    with recorded_gateway(monkeypatch, vision_model_dir(), fake={"max_model_len": 32768, "image_tokens": 64},
                          served_model_name=MODEL, reasoning_secret="codex-images") as r:
        yield r.url, r.fake, r.traffic


def png_bytes() -> bytes:
    buffer = io.BytesIO()
    PILImage.new("RGB", (120, 80), (0, 128, 255)).save(buffer, "PNG")
    return buffer.getvalue()


def test_codex_views_an_image_and_the_next_request_carries_it(stack, codex_bin, qwen36, tmp_path):
    url, fake, traffic = stack
    shot = tmp_path / "shot.png"
    shot.write_bytes(png_bytes())
    view = output_ids(qwen36, xml_call("Look at the shot.", "view_image", {"path": str(shot)}), "shot")
    answer = output_ids(qwen36, "A blue box.\n</think>\n\nIt is a blue rectangle.<|im_end|>", "blue")
    fake.queue(Script(view), Script(answer))
    config = f'model_catalog_json = "{catalog(tmp_path / "models.json", images=True)}"'
    run, _ = codex_exec(codex_bin, url, tmp_path, f"What is in {shot}?", config=config)
    assert run.returncode == 0, run.stderr
    assert [m["text"] for m in run.items("agent_message")] == ["It is a blue rectangle."]

    first, second = fake.bodies(GENERATE)
    assert "content_parts" not in first and IMAGE_PAD not in first["token_ids"]
    assert second["content_parts"] == [
        {"type": "image_url", "url": "data:image/png;base64," + base64.b64encode(png_bytes()).decode()}]
    assert second["token_ids"].count(IMAGE_PAD) == 1
    assert continues(second["token_ids"], first["token_ids"], view)
    [output] = [i for i in traffic.posts[-1].body["input"] if i["type"] == "function_call_output"]
    assert any(part.get("type") == "input_image" for part in output["output"])
