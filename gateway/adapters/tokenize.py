"""vLLM's `/tokenize` and `/detokenize` bodies, read for the gateway.

`messages` (vLLM's TokenizeChatRequest) are read as a Chat Completions request would be: the
same history, tools and `chat_template_kwargs`, and the same sources of exact earlier tokens
(ids on the last assistant message, `rollout_id`, `prompt_cache_key`), so the tokens answered
are the prompt the gateway would send for it, spliced ids and all — what NeMo-Gym reads as
the prompt of the call it just made. A `prompt` (TokenizeCompletionRequest) is plain text,
tokenized by a replica as vLLM tokenizes it.

The gateway renders with the generation prompt and no extra special tokens, vLLM's defaults
for messages; the other settings of those flags are refused with a 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.adapters.chat.input import ChatRequest, parse_chat_request
from gateway.adapters.request_schema import DetokenizeBody, TokenizeBody, validate
from gateway.core.errors import invalid_request

__all__ = ["parse_detokenize", "parse_tokenize"]


@dataclass(frozen=True, slots=True)
class TokenizeRequest:
    chat: ChatRequest | None  # `messages`
    prompt: dict[str, Any] | None  # `prompt`: the body for a replica's /tokenize
    token_strs: bool  # `return_token_strs`
    rollout_id: str | None = None


def parse_tokenize(body: Any, model: str) -> TokenizeRequest:
    """`model`: the served model's name (vLLM's default when the body names none)."""
    validate(TokenizeBody, body)
    if (body.get("prompt") is None) == (body.get("messages") is None):
        raise invalid_request("Send either 'prompt' (text) or 'messages' (a conversation).", param="messages",
                              code="missing_required_parameter")
    token_strs = bool(body.get("return_token_strs"))
    if body.get("prompt") is not None:
        extra = sorted(set(body) - {"model", "prompt", "add_special_tokens", "return_token_strs"})
        if extra:
            raise invalid_request(f"'{extra[0]}' applies to 'messages', not to a text 'prompt'.", param=extra[0])
        return TokenizeRequest(chat=None, token_strs=token_strs, prompt={
            "prompt": body["prompt"], "add_special_tokens": body.get("add_special_tokens", True),
            "return_token_strs": token_strs})
    for flag, refused, why in (("add_generation_prompt", False, "the prompt always ends with the generation prompt"),
                               ("continue_final_message", True, "the prompt always opens a new assistant turn"),
                               ("add_special_tokens", True, "the chat template places every special token")):
        if body.get(flag) is refused:
            raise invalid_request(f"'{flag}': {str(refused).lower()} is not supported: {why}, as in the prompt the "
                                  f"gateway sends for these messages.", param=flag, code="unsupported_value")
    chat_body = {key: body[key] for key in ("messages", "tools", "chat_template_kwargs", "rollout_id",
                                            "prompt_cache_key") if body.get(key) is not None}
    chat = parse_chat_request({"model": body.get("model") or model, **chat_body})
    return TokenizeRequest(chat=chat, prompt=None, token_strs=token_strs, rollout_id=body.get("rollout_id"))


def parse_detokenize(body: Any) -> list[int]:
    validate(DetokenizeBody, body)
    return body["tokens"]
