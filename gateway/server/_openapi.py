"""GET /openapi.json: the gateway's own API description (OpenAPI 3.1).

The request and response bodies are OpenAI's (their schemas are referenced by name from
OpenAI's published description, https://github.com/openai/openai-openapi); what this
describes in full is what the gateway adds: the token-level extensions (`return_token_ids`,
`rollout_id`, `response_mask`, per-message `prompt_token_ids`/`generation_token_ids`, vLLM's
extra sampling fields), the fields it returns with them, and its own endpoints (rollouts,
health). Built once, from data: no route introspection.
"""

from __future__ import annotations

import functools
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.server.http import JSONResponse

__all__ = ["openapi_endpoint"]

_OPENAI = "https://raw.githubusercontent.com/openai/openai-openapi/master/openapi.yaml#/components/schemas/"
_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}

_EXTENSIONS: dict[str, Any] = {
    "return_token_ids": {"type": "boolean", "description": "Return the exact prompt and output token ids "
                         "(and the output logprobs) with the response."},
    "rollout_id": {"type": "string", "description": "Record this call in the RL rollout's trajectory."},
    "response_mask": {"type": "array", "items": {"type": "integer", "enum": [0, 1]},
                      "description": "One 0/1 per prompt token this call adds to the rollout."},
    "top_k": {"type": "integer"}, "min_p": {"type": "number"}, "repetition_penalty": {"type": "number"},
}

# vLLM's own fields on Chat Completions (gateway/adapters/chat/_vllm_fields.py)
_VLLM_CHAT: dict[str, Any] = {
    "return_tokens_as_token_ids": {"type": "boolean", "description": "Every logprobs token is \"token_id:N\"."},
    "min_tokens": {"type": "integer"}, "stop_token_ids": _IDS, "ignore_eos": {"type": "boolean"},
    "cache_salt": {"type": "string"}, "priority": {"type": "integer"},
}
_VLLM_BODY = {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "description": "vLLM's request body (its OpenAI server's protocol)"}}}}

_RESPONSE_EXTENSIONS: dict[str, Any] = {
    "prompt_token_ids": _IDS, "output_token_ids": _IDS,
    "output_logprobs": {"type": "array", "items": {"type": "number"}},
}


def _body(openai_schema: str, extensions: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": {
        "allOf": [{"$ref": _OPENAI + openai_schema}, {"type": "object", "properties": extensions}]}}}}


def _ok(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"200": {"description": description, "content": {"application/json": {"schema": schema}}},
            "default": {"description": "An OpenAI-shaped error",
                        "content": {"application/json": {"schema": {"$ref": _OPENAI + "ErrorResponse"}}}}}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": _OPENAI + name}


_ID = [{"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}]
_ROLLOUT = [{"name": "rollout_id", "in": "path", "required": True, "schema": {"type": "string"}}]
_CONVERSATION = [{"name": "conversation_id", "in": "path", "required": True, "schema": {"type": "string"}}]
_ITEM = [*_CONVERSATION, {"name": "item_id", "in": "path", "required": True, "schema": {"type": "string"}}]
_PAGE = [{"name": name, "in": "query", "required": False, "schema": schema} for name, schema in (
    ("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
    ("order", {"type": "string", "enum": ["asc", "desc"]}), ("after", {"type": "string"}))]


@functools.cache
def description() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "vllm-agent-gateway", "version": "1",
                 "description": "OpenAI Responses and Chat Completions in front of stock vLLM, at the token "
                                "level. Bodies are OpenAI's; the extensions are described here."},
        "paths": {**_responses_paths(), **_conversation_paths(), **_chat_paths(), **_vllm_paths(), **_ops_paths()},
    }


def _responses_paths() -> dict[str, Any]:
    """The Responses API and its extensions."""
    response = {"allOf": [_ref("Response"), {"type": "object", "properties": _RESPONSE_EXTENSIONS}]}
    return {
        "/v1/responses": {"post": {
            "summary": "Create a response (JSON, SSE stream, or background)",
            "requestBody": _body("CreateResponse", _EXTENSIONS),
            "responses": _ok(response)}},
        "/v1/responses/compact": {"post": {
            "summary": "Compact a history: its user messages and one compaction item (the model's summary)",
            "requestBody": _body("CompactResponseMethodPublicBody", {}), "responses": _ok(_ref("CompactResource"))}},
        "/v1/responses/input_tokens": {"post": {
            "summary": "The length of the prompt a response to this body would send (a session's exact "
                       "tokens spliced in, images as vLLM expands them): OpenAI's TokenCountsBody → "
                       "TokenCountsResource, with `prompt_cache_key`",
            "responses": _ok({"type": "object", "properties": {
                "object": {"const": "response.input_tokens"}, "input_tokens": {"type": "integer"}}})}},
        "/v1/responses/{response_id}": {
            "get": {"summary": "A stored response; with stream=true, a background response's events "
                               "(after `starting_after`) as an SSE stream", "parameters": [*_ID, *[
                {"name": name, "in": "query", "required": False, "schema": schema} for name, schema in (
                    ("stream", {"type": "boolean"}), ("starting_after", {"type": "integer", "minimum": 0}))]],
                    "responses": _ok(response)},
            "delete": {"summary": "Delete a stored response", "parameters": _ID,
                       "responses": _ok({"type": "object"})}},
        "/v1/responses/{response_id}/input_items": {"get": {
            "summary": "A stored response's input items", "parameters": [*_ID, *_PAGE],
            "responses": _ok(_ref("ResponseItemList"))}},
        "/v1/responses/{response_id}/cancel": {"post": {
            "summary": "Cancel a background response", "parameters": _ID, "responses": _ok(response)}},
    }


def _conversation_paths() -> dict[str, Any]:
    """OpenAI's Conversations API."""
    return {
        "/v1/conversations": {"post": {"summary": "Create a conversation (OpenAI's Conversations API)",
                                       "responses": _ok({"type": "object"})}},
        "/v1/conversations/{conversation_id}": {
            "get": {"summary": "A conversation", "parameters": _CONVERSATION, "responses": _ok({"type": "object"})},
            "post": {"summary": "Update a conversation's metadata", "parameters": _CONVERSATION,
                     "responses": _ok({"type": "object"})},
            "delete": {"summary": "Delete a conversation", "parameters": _CONVERSATION,
                       "responses": _ok({"type": "object"})}},
        "/v1/conversations/{conversation_id}/items": {
            "get": {"summary": "A conversation's items", "parameters": [*_CONVERSATION, *_PAGE],
                    "responses": _ok({"type": "object"})},
            "post": {"summary": "Add items (at most 20)", "parameters": _CONVERSATION,
                     "responses": _ok({"type": "object"})}},
        "/v1/conversations/{conversation_id}/items/{item_id}": {
            "get": {"summary": "One item", "parameters": _ITEM, "responses": _ok({"type": "object"})},
            "delete": {"summary": "Delete an item (the next prompt is rendered in full)", "parameters": _ITEM,
                       "responses": _ok({"type": "object"})}},
    }


def _chat_paths() -> dict[str, Any]:
    """Chat Completions with the token-id extensions."""
    chat_message_ids = {"prompt_token_ids": _IDS, "generation_token_ids": _IDS}
    return {
        "/v1/chat/completions": {"post": {
            "summary": "Create a chat completion",
            "requestBody": _body("CreateChatCompletionRequest", {
                **_EXTENSIONS, **_VLLM_CHAT, "messages": {"type": "array", "items": {"type": "object",
                                                                         "properties": chat_message_ids}}}),
            "responses": _ok({"allOf": [_ref("CreateChatCompletionResponse"), {"type": "object", "properties": {
                "prompt_token_ids": _IDS, "choices": {"type": "array", "items": {
                    "type": "object", "properties": {
                        "token_ids": _IDS, "stop_reason": {"type": ["integer", "string", "null"]},
                        "rollout_id": {"type": "string", "description": "With n > 1 and a rollout_id: "
                                       "the rollout branch this sample is recorded in"}}}}}}]})}},
    }


def _vllm_paths() -> dict[str, Any]:
    """vLLM's own endpoints the gateway serves."""
    return {
        "/tokenize": {"post": {
            "summary": "vLLM's /tokenize: a conversation's prompt as the gateway sends it (exact ids spliced "
                       "in), or a text prompt's ids", "requestBody": _VLLM_BODY,
            "responses": _ok({"type": "object", "properties": {
                "count": {"type": "integer"}, "max_model_len": {"type": ["integer", "null"]}, "tokens": _IDS,
                "token_strs": {"type": "array", "items": {"type": "string"}}}})}},
        "/detokenize": {"post": {"summary": "vLLM's /detokenize", "requestBody": _VLLM_BODY,
                                 "responses": _ok({"type": "object", "properties": {"prompt": {"type": "string"}}})}},
        "/v1/completions": {"post": {
            "summary": "vLLM's Completions (text or token-id prompts), passed through to a replica; "
                       "`rollout_id` or the X-Session-ID header records it in that rollout",
            "requestBody": _VLLM_BODY, "responses": _ok({"type": "object"})}},
        "/inference/v1/generate": {"post": {
            "summary": "vLLM's token-in generate, passed through to a replica; `rollout_id` or the "
                       "X-Session-ID header records it in that rollout",
            "requestBody": _VLLM_BODY, "responses": _ok({"type": "object"})}},
    }


def _ops_paths() -> dict[str, Any]:
    """Models, rollouts and probes."""
    return {
        "/v1/models": {"get": {"summary": "The served model", "responses": _ok(_ref("ListModelsResponse"))}},
        "/v1/rollouts": {"get": {"summary": "Rollout store counters", "responses": _ok({"type": "object"})}},
        "/v1/rollouts/{rollout_id}": {
            "get": {"summary": "Export a rollout's exact trajectory", "parameters": _ROLLOUT,
                    "responses": _ok({"type": "object"})},
            "delete": {"summary": "Free a rollout", "parameters": _ROLLOUT, "responses": _ok({"type": "object"})}},
        "/health": {"get": {"summary": "Replica states", "responses": _ok({"type": "object"})}},
        "/ready": {"get": {"summary": "Readiness probe", "responses": _ok({"type": "object"})}},
        "/live": {"get": {"summary": "Liveness probe", "responses": _ok({"type": "object"})}},
    }

async def openapi_endpoint(request: Request) -> Response:
    return JSONResponse(description())
