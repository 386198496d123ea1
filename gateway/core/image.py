"""Image inputs, checked once where they enter: a data URL or base64 bytes a client attached.

Every API names an image its own way (Responses `input_image`, Chat `image_url`, Anthropic `image`
blocks); each adapter turns it into one `Image` here. The bytes are decoded and their size read
by Pillow (header only) so that a bad image is a clear 400 before anything is rendered or sent,
the limits are enforced where the client sees them, and the prompt's length can be counted
(gateway/core/vision.py); the server's limits are checked on the whole request's images
(`check_images`). An `Image` keeps the data URL it is sent to vLLM as
(`content_parts: [{"type": "image_url", "url": …}]`) and a content hash that names it in
sessions and rollouts. The gateway never fetches a URL itself (SSRF): an http(s) URL is refused,
or, with `--allow-image-urls`, passed on for vLLM to fetch under its own `--allowed-media-domains`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
from dataclasses import dataclass

from PIL import Image as PILImage
from PIL import UnidentifiedImageError

from gateway.core.errors import APIError, invalid_request

__all__ = ["Image", "ImageLimits", "check_images", "file_image", "image_from_base64", "image_from_url", "text_only"]

MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+)?(?:;[\w.+-]+=[^;,]*)*;base64,", re.ASCII)


@dataclass(frozen=True, slots=True)
class Image:
    """One image input: the URL vLLM is sent, its content hash, its size in pixels and bytes."""

    url: str  # data:<type>;base64,… (or, passed through, the client's http(s) URL)
    digest: str  # sha256 hex of the bytes (of the URL when passed through)
    width: int | None = None  # None: not known (a passed-through URL)
    height: int | None = None
    nbytes: int = 0


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """What one request may attach (--max-image-bytes, --max-images, --max-image-pixels, --allow-image-urls)."""

    max_bytes: int = 20 * 1024 * 1024
    max_images: int = 32
    max_pixels: int = 8192 * 8192
    allow_urls: bool = False


def image_from_url(url: str, *, param: str) -> Image:
    """A `data:` URL (decoded and checked), or an http(s) URL (kept for `check_images` to refuse or pass on)."""
    found = _DATA_URL.match(url)
    if found is not None:
        return image_from_base64(url[found.end():], param=param)
    if url.startswith(("http://", "https://")):
        return Image(url=url, digest=hashlib.sha256(url.encode()).hexdigest())
    raise invalid_request(f"'{param}' is not a data URL (data:image/png;base64,…) or an http(s) URL.",
                          param=param, code="invalid_image_url")


def image_from_base64(data: str, *, param: str) -> Image:
    """Base64 image bytes (Anthropic's `source.data`, a data URL's payload), checked; sent as the type
    the bytes are, whatever the client labelled them."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise invalid_request(f"'{param}' is not valid base64 image data.", param=param,
                              code="invalid_image") from None
    try:
        with PILImage.open(io.BytesIO(raw)) as image:
            width, height, kind = image.width, image.height, PILImage.MIME.get(image.format or "")
    except (UnidentifiedImageError, OSError, ValueError):
        raise invalid_request(f"'{param}' is not an image this gateway reads (PNG, JPEG, GIF or WebP).",
                              param=param, code="invalid_image") from None
    if kind not in MEDIA_TYPES:
        raise invalid_request(f"'{param}' is {kind or 'an unknown format'}; images must be PNG, JPEG, GIF or WebP.",
                              param=param, code="invalid_image")
    return Image(url=f"data:{kind};base64,{data}", digest=hashlib.sha256(raw).hexdigest(), width=width,
                 height=height, nbytes=len(raw))


def file_image(param: str) -> APIError:
    return invalid_request(f"'{param}' names an uploaded file; this gateway has no file store: send the image "
                           "as a data URL or base64.", param=param, code="unsupported_image_file")


def check_images(images: list[Image], limits: ImageLimits) -> None:
    """A request's images against the server's limits (413 for bytes, 400 for the rest)."""
    if len(images) > limits.max_images:
        raise invalid_request(f"The request has {len(images)} images; at most {limits.max_images} are accepted.",
                              param="input", code="too_many_images")
    for n, image in enumerate(images, 1):
        if image.width is None and not limits.allow_urls:
            raise invalid_request(f"Image {n} is an http(s) URL; this gateway takes images as data URLs or base64 "
                                  "only (it never fetches URLs; a server started with --allow-image-urls passes "
                                  "them on for vLLM to fetch).", param="input", code="unsupported_image_url")
        if image.nbytes > limits.max_bytes:
            raise APIError(f"Image {n} is {image.nbytes} bytes; images may be at most {limits.max_bytes} bytes.",
                           status=413, param="input", code="image_too_large")
        if image.width is not None and image.height is not None and image.width * image.height > limits.max_pixels:
            raise invalid_request(f"Image {n} is {image.width}×{image.height} pixels; at most {limits.max_pixels} "
                                  "pixels are accepted per image.", param="input", code="image_too_large")


def text_only(param: str) -> APIError:
    """Today's refusal for a model without a vision encoder."""
    return invalid_request(f"'{param}' is an image, but the served model accepts text only.", param=param,
                           code="unsupported_content")
