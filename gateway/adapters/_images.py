"""Image parts as each API writes them, read into `Image`s (gateway/core/image.py).

Responses: `{"type": "input_image", "image_url": "data:…", "detail": …}` (or `file_id`) in a message's
content or a `function_call_output`'s output array (Codex's `view_image`). Chat Completions:
`{"type": "image_url", "image_url": {"url": …, "detail": …}}`. Anthropic: `{"type": "image",
"source": {"type": "base64", "media_type": …, "data": …}}` (or `url`, or `file`), in a message or
a `tool_result` (Claude Code's Read of an image). `detail` is accepted and has no effect: vLLM's
processor sizes an image by the model's own preprocessor config.
"""

from __future__ import annotations

from typing import Any

from gateway.adapters.request_schema import ChatImagePart, ImagePart
from gateway.core.errors import invalid_request
from gateway.core.image import Image, file_image, image_from_base64, image_from_url

__all__ = ["anthropic_image", "chat_image", "responses_image"]


def responses_image(part: ImagePart, param: str) -> Image:
    url = part.image_url
    if url is None and part.file_id is not None:
        raise file_image(f"{param}.file_id")
    if url is None:
        raise invalid_request(f"Missing required parameter: '{param}.image_url'.", param=f"{param}.image_url",
                              code="missing_required_parameter")
    return image_from_url(url, param=f"{param}.image_url")


def chat_image(part: ChatImagePart, param: str) -> Image:
    given = part.image_url  # the URL, or {"url": …}
    url = given if given is None or isinstance(given, str) else given.url
    if url is None:
        raise invalid_request(f"Missing required parameter: '{param}.image_url.url'.", param=f"{param}.image_url.url",
                              code="missing_required_parameter")
    return image_from_url(url, param=f"{param}.image_url.url")


def anthropic_image(source: Any, param: str) -> Image:
    source = source if isinstance(source, dict) else {}
    kind = source.get("type")
    if kind == "base64" and isinstance(source.get("data"), str):
        return image_from_base64(source["data"], param=f"{param}.source.data")
    if kind == "url" and isinstance(source.get("url"), str):
        return image_from_url(source["url"], param=f"{param}.source.url")
    if kind == "file":
        raise file_image(f"{param}.source.file_id")
    raise invalid_request(f"{param}.source: expected a base64 or url image source.", param=f"{param}.source")
