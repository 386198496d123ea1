"""The accepted request shapes, as typed models: every body is checked once, where its adapter
receives it, and the code below trusts what passed.

Models are strict (no "5" for 5, no true for 1; gateway/adapters/_schema_base.py) and the top
level takes no parameter it does not know: OpenAI's own, vLLM's extra sampling fields the
gateway forwards, and the gateway's RL fields. Sampling values are range-checked as vLLM's
`SamplingParams` does, so a replica never answers a 400 for a value the gateway let through.
Free-form objects the gateway echoes or renders (metadata, a tool's parameters, text, ...) are
bounded in depth. `tools` and `tool_choice` are in gateway/adapters/_tool_schema.py.

A pydantic error becomes one OpenAI-shaped 400 whose `param` is the path in the body
(`input[3].content`): union members and item tags, which pydantic puts in its error
locations, are dropped by walking the location along the body itself.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, ValidationError

from gateway.adapters._schema_base import Bounded, Model, Obj, Objs
from gateway.adapters._tool_schema import ChatTool, ChatToolChoice, FunctionSpec, ResponsesTool, ToolChoice
from gateway.adapters.validation import type_name
from gateway.core.errors import APIError, invalid_request

__all__ = [
    "MAX_BULK_IDS",
    "ROLLOUT_ID",
    "AnswerFormat",
    "ChatAnswerFormat",
    "ChatBody",
    "ChatImagePart",
    "ChatJsonSchemaFormat",
    "ChatMessage",
    "CompactionItem",
    "Content",
    "ConversationBody",
    "ConversationUpdateBody",
    "CustomToolCallItem",
    "DetokenizeBody",
    "FunctionCallItem",
    "ImagePart",
    "InputItem",
    "ItemsBody",
    "JsonSchemaFormat",
    "LocalShellCallItem",
    "LocalShellOutputItem",
    "McpApprovalResponseItem",
    "McpCallItem",
    "McpListToolsItem",
    "MessageItem",
    "OtherItem",
    "Part",
    "ReasoningItem",
    "RefusalPart",
    "RequestBody",
    "ResponsesBody",
    "RolloutExportBody",
    "TextPart",
    "TokenInFields",
    "TokenizeBody",
    "ToolOutputItem",
    "body_field",
    "conversation_ref",
    "validate",
    "validate_items",
]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
INT64 = 2**63
TOKEN_ID_LIMIT = 2**31  # token ids travel as int32
Temperature = Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)]
TopP = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
Penalty = Annotated[float, Field(ge=-2, le=2, allow_inf_nan=False)]
TokenIds = list[Annotated[int, Field(ge=0, lt=TOKEN_ID_LIMIT)]]
Mask = list[Annotated[int, Field(ge=0, le=1)]]
ROLLOUT_ID = r"^[A-Za-z0-9_.:-]{1,256}$"  # the one rule for a rollout id, wherever one comes from
RolloutId = Annotated[str, Field(pattern=ROLLOUT_ID)]
NonEmpty = Annotated[str, Field(min_length=1)]


def _token_key(key: str) -> str:
    """A `logit_bias` key: a token id, written as JSON writes an object's keys."""
    if not (key.isascii() and key.isdigit() and int(key) < TOKEN_ID_LIMIT):
        raise ValueError("a logit_bias key is a token id (0 to 2^31 - 1)")
    return key


class RequestBody(BaseModel):
    """Top-level parameters shared by Responses and Chat Completions."""

    model_config = ConfigDict(strict=True, extra="forbid")

    model: str
    stream: bool | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    parallel_tool_calls: bool | None = None
    metadata: Obj | None = None
    store: bool | None = None
    user: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    stream_options: Obj | None = None
    # vLLM's extra sampling parameters (its SamplingParams ranges)
    top_k: Annotated[int, Field(ge=-1)] | None = None
    min_p: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    seed: Annotated[int, Field(ge=-INT64, lt=INT64)] | None = None
    # the gateway's RL fields (gateway/adapters/rollout_fields.py)
    return_token_ids: bool | None = None
    rollout_id: RolloutId | None = None
    response_mask: Mask | None = None


# -- Responses ----------------------------------------------------------------------------
# Items and content parts are what the adapters read (gateway/adapters/responses/input.py,
# chat/input.py, responses/mcp_tools.py): each model holds the fields they use, and the rules the
# schema cannot say (a call_id no call made, an image where none is taken) stay there.

class TextPart(Model):
    text: str


class RefusalPart(Model):
    refusal: str | None = None


class ImagePart(Model):
    """Responses' `input_image` (a data URL, or a `file_id` the gateway refuses)."""

    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None


class _ImageUrl(Model):
    url: str


class ChatImagePart(Model):
    """Chat Completions' `image_url` part: `{"url": …}`, or the URL itself."""

    type: Literal["image_url"]
    image_url: str | _ImageUrl | None = None


class OtherPart(Model):
    """Media the adapters refuse with a clear message (files, audio) and unknown types (likewise)."""

    type: str | None = None


_PART_KINDS = {"input_text": "text", "output_text": "text", "text": "text", "summary_text": "text",
               "reasoning_text": "text", "refusal": "refusal", "input_image": "image", "image_url": "chat_image"}


def _part_kind(part: Any) -> str:
    kind = part.get("type") if isinstance(part, dict) else None
    return _PART_KINDS.get(kind, "other") if isinstance(kind, str) else "other"


Part = Annotated[Annotated[TextPart, Tag("text")] | Annotated[RefusalPart, Tag("refusal")]
                 | Annotated[ImagePart, Tag("image")] | Annotated[ChatImagePart, Tag("chat_image")]
                 | Annotated[OtherPart, Tag("other")], Discriminator(_part_kind)]
Content = str | list[Part]


class MessageItem(Model):
    role: Literal["user", "assistant", "system", "developer"]
    content: Content
    phase: str | None = None


class ReasoningItem(Model):
    content: list[Part] | None = None
    encrypted_content: str | None = None
    summary: list[Part] | None = None


class FunctionCallItem(Model):
    call_id: str
    name: str
    arguments: str
    namespace: str | None = None


class CustomToolCallItem(Model):
    call_id: str
    name: str
    input: str


class ToolOutputItem(Model):
    """`function_call_output` and `custom_tool_call_output`."""

    call_id: str
    output: str | list[Part] | TextPart


class LocalShellCallItem(Model):
    call_id: str | None = None  # older payloads name the call by `id` alone
    id: str | None = None
    action: Obj


class LocalShellOutputItem(Model):
    call_id: str | None = None
    id: str | None = None
    output: str | list[Part] | TextPart


class CompactionItem(Model):
    encrypted_content: str


class McpListToolsItem(Model):
    server_label: str
    tools: Objs
    error: str | Obj | None = None


class McpCallItem(Model):
    """An `mcp_call`, or an `mcp_approval_request` (no output or error)."""

    type: Literal["mcp_call", "mcp_approval_request"]
    id: str
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    error: str | Obj | None = None


class McpApprovalResponseItem(Model):
    approval_request_id: str
    approve: bool
    reason: str | None = None


class OtherItem(Model):
    """`item_reference` (refused: no items are stored) and `compaction_trigger` (taken off the end)."""

    type: Literal["item_reference", "compaction_trigger"]


_ITEMS = {"message": MessageItem, "reasoning": ReasoningItem, "function_call": FunctionCallItem,
          "custom_tool_call": CustomToolCallItem, "function_call_output": ToolOutputItem,
          "custom_tool_call_output": ToolOutputItem, "local_shell_call": LocalShellCallItem,
          "local_shell_call_output": LocalShellOutputItem, "item_reference": OtherItem,
          "compaction": CompactionItem, "compaction_trigger": OtherItem, "mcp_list_tools": McpListToolsItem,
          "mcp_call": McpCallItem, "mcp_approval_request": McpCallItem,
          "mcp_approval_response": McpApprovalResponseItem}


def _item_kind(item: Any) -> str | None:
    kind = item.get("type", "message") if isinstance(item, dict) else None
    return kind if isinstance(kind, str) and kind in _ITEMS else None


InputItem = Annotated[Annotated[MessageItem, Tag("message")] | Annotated[ReasoningItem, Tag("reasoning")]
                      | Annotated[FunctionCallItem, Tag("function_call")]
                      | Annotated[CustomToolCallItem, Tag("custom_tool_call")]
                      | Annotated[ToolOutputItem, Tag("function_call_output")]
                      | Annotated[ToolOutputItem, Tag("custom_tool_call_output")]
                      | Annotated[LocalShellCallItem, Tag("local_shell_call")]
                      | Annotated[LocalShellOutputItem, Tag("local_shell_call_output")]
                      | Annotated[OtherItem, Tag("item_reference")]
                      | Annotated[CompactionItem, Tag("compaction")] | Annotated[OtherItem, Tag("compaction_trigger")]
                      | Annotated[McpListToolsItem, Tag("mcp_list_tools")] | Annotated[McpCallItem, Tag("mcp_call")]
                      | Annotated[McpCallItem, Tag("mcp_approval_request")]
                      | Annotated[McpApprovalResponseItem, Tag("mcp_approval_response")],
                      Discriminator(_item_kind, custom_error_type="unsupported_item",
                                    custom_error_message="unsupported input item type")]


class _PlainFormat(Model):
    type: Literal["text", "json_object"]


class JsonSchemaFormat(Model):
    """Responses' `text.format` of type `json_schema`: the answer is JSON matching `schema`."""

    type: Literal["json_schema"]
    name: str
    schema_: Obj = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


AnswerFormat = Annotated[_PlainFormat | JsonSchemaFormat, Field(discriminator="type")]


class _TextOptions(Model):
    format: AnswerFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class _ReasoningOptions(Model):
    effort: str | None = None
    summary: str | None = None


class _ConversationRef(Model):
    id: str


ConversationRef = str | _ConversationRef  # an id, or `{"id": …}`


class ResponsesBody(RequestBody):
    """POST /v1/responses, and `response.create` without its transport fields."""

    input: str | list[InputItem]
    tools: Annotated[list[ResponsesTool], Bounded] | None = None
    tool_choice: ToolChoice | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    reasoning: _ReasoningOptions | None = None
    text: _TextOptions | None = None
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    background: bool | None = None
    max_tool_calls: Annotated[int, Field(ge=1)] | None = None
    prompt: Obj | None = None
    conversation: ConversationRef | None = None
    context_management: Objs | None = None
    client_metadata: Obj | None = None  # Codex's


# -- Chat Completions ---------------------------------------------------------------------

class _JsonSchema(Model):
    name: str
    schema_: Obj | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None


class ChatJsonSchemaFormat(Model):
    """`response_format` of type `json_schema`: nested under `json_schema`."""

    type: Literal["json_schema"]
    json_schema: _JsonSchema


ChatAnswerFormat = Annotated[_PlainFormat | ChatJsonSchemaFormat, Field(discriminator="type")]
TokenKey = Annotated[str, AfterValidator(_token_key)]

class ChatFunction(Model):
    name: str
    arguments: str


class ChatToolCall(Model):
    id: str
    function: ChatFunction


class ChatMessage(Model):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Content | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ChatToolCall] | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None
    prompt_token_ids: TokenIds | None = None  # NeMo-RL's exact ids of the history up to this message
    generation_token_ids: TokenIds | None = None


class ChatBody(RequestBody):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage]
    tools: Annotated[list[ChatTool], Bounded] | None = None
    tool_choice: ChatToolChoice | None = None
    n: Annotated[int, Field(ge=1, le=16)] | None = None
    stop: NonEmpty | Annotated[list[NonEmpty], Field(max_length=4)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool | None = None
    reasoning_effort: str | None = None
    chat_template_kwargs: Obj | None = None  # vLLM's; {"enable_thinking": false} turns thinking off
    response_format: ChatAnswerFormat | None = None
    logit_bias: dict[TokenKey, Annotated[float, Field(ge=-100, le=100, allow_inf_nan=False)]] | None = None
    modalities: list[str] | None = None
    audio: Obj | None = None
    prediction: Obj | None = None
    web_search_options: Obj | None = None
    verbosity: str | None = None
    function_call: str | Obj | None = None
    functions: Annotated[list[FunctionSpec], Bounded] | None = None
    # vLLM's extra fields (gateway/adapters/chat/_vllm_fields.py)
    return_tokens_as_token_ids: bool | None = None
    skip_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None
    min_tokens: Annotated[int, Field(ge=0)] | None = None
    stop_token_ids: TokenIds | None = None
    ignore_eos: bool | None = None
    cache_salt: str | None = None
    priority: Annotated[int, Field(ge=-INT64, lt=INT64)] | None = None
    prompt_logprobs: int | None = None


# -- vLLM's /tokenize and /detokenize ----------------------------------------------------

class _Closed(BaseModel):
    """A top level: no parameter it does not know."""

    model_config = ConfigDict(strict=True, extra="forbid")


class _VLLMBody(_Closed):
    model: str | None = None


class TokenizeBody(_VLLMBody):
    """POST /tokenize: vLLM's TokenizeCompletionRequest (`prompt`) or TokenizeChatRequest
    (`messages`), with the gateway's own ways to name a conversation it knows."""

    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    tools: Annotated[list[ChatTool], Bounded] | None = None
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    add_special_tokens: bool | None = None
    return_token_strs: bool | None = None
    chat_template_kwargs: Obj | None = None
    rollout_id: RolloutId | None = None
    prompt_cache_key: str | None = None


class DetokenizeBody(_VLLMBody):
    """POST /detokenize."""

    tokens: TokenIds


# -- the gateway's own bodies: rollouts, conversations, token-in ------------------------

MAX_BULK_IDS = 100_000  # rollouts one export may name


class RolloutExportBody(_Closed):
    """POST /v1/rollouts/export."""

    ids: Annotated[list[str], Field(min_length=1, max_length=MAX_BULK_IDS)]
    format: Literal["gateway", "verl", "slime"] | None = None
    delete: bool | None = None


# OpenAI's metadata: at most 16 string pairs, keys up to 64 characters, values up to 512.
Metadata = Annotated[dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]],
                     Field(max_length=16)]


class ConversationBody(_Closed):
    """POST /v1/conversations (its items are checked as input items, with their place: `items[3]`)."""

    items: list[dict[str, Any]] | None = None
    metadata: Metadata | None = None


class ConversationUpdateBody(_Closed):
    """POST /v1/conversations/{id}."""

    metadata: Metadata


class ItemsBody(_Closed):
    """POST /v1/conversations/{id}/items."""

    items: list[dict[str, Any]]


class TokenInFields(BaseModel):
    """The fields of a `/v1/completions` or `/inference/v1/generate` body the gateway acts on; the
    rest is vLLM's to check."""

    model_config = ConfigDict(strict=True, extra="allow")

    model: str | None = None
    rollout_id: RolloutId | None = None
    session_id: str | None = None
    partial_rollout: bool | None = None


# -- errors -------------------------------------------------------------------------------

def validate(model: type[M], body: Any) -> M:
    """`body` as `model` (what the adapter reads from then on); the first problem as a 400 naming its path."""
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_type")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise _api_error(exc.errors(include_url=False, include_context=False), body) from None


_INPUT_ITEMS: TypeAdapter[list[InputItem]] = TypeAdapter(list[InputItem])


def validate_items(raw: Any, param: str) -> list[InputItem]:
    """Responses input items that came in another field than a body's `input` (a Conversation's
    `items`, a history read back from bytes or a store) checked as `input` is; 400s name `param[3].content`."""
    return _validate_field(_INPUT_ITEMS, raw, param)


def body_field(model: type[BaseModel], name: str, raw: Any) -> Any:
    """One field of a body read before the body is checked (the history it names comes first:
    `previous_response_id`, `conversation`), checked as the body will check it."""
    return _validate_field(_field_adapter(model, name), raw, name)


@functools.cache
def _field_adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    field = model.model_fields[name]
    return TypeAdapter(Annotated[field.annotation, field])


def conversation_ref(raw: Any) -> str | None:
    """A Responses body's `conversation` (checked before the body: its history comes first): the
    conversation's id."""
    found = body_field(ResponsesBody, "conversation", raw)
    return found.id if isinstance(found, _ConversationRef) else found


def _validate_field(adapter: TypeAdapter[T], raw: Any, param: str) -> T:
    try:
        return adapter.validate_python(raw, strict=True)
    except ValidationError as exc:
        raise _api_error(exc.errors(include_url=False, include_context=False), raw, param) from None


_WANTED = {"string_type": "a string", "int_type": "an integer", "float_type": "a number", "bool_type": "a boolean",
           "list_type": "an array", "dict_type": "an object", "model_type": "an object", "literal_error": None,
           "object_type": "an object", "string_or_object": "a string or an object"}  # the last two: by_type's


def _api_error(errors: list[Any], body: Any, field: str | None = None) -> APIError:
    """`field`: the name of `body` in the request, when it is not the whole body."""
    base: list[str | int] = [field] if field is not None else []
    located = [([*base, *_path(error["loc"], body, error["type"])], error) for error in errors]
    depth = max(len(path) for path, _ in located)
    path = next(path for path, _ in located if len(path) == depth)
    here = [error for p, error in located if p == path]
    # A value of the right type for one member of a union: that member's complaint, not the others' types.
    error = next((e for e in here if e["type"] not in _WANTED), here[0])
    param = _param(path)
    kind, value = error["type"], error.get("input")
    if kind == "extra_forbidden":
        names = ", ".join(f"'{_param(p)}'" for p, e in located if e["type"] == "extra_forbidden")
        return invalid_request(f"Unknown parameter: {names}.", param=param, code="unknown_parameter")
    if kind in ("missing", "union_tag_not_found"):
        param = param if kind == "missing" else f"{param}.type"
        return invalid_request(f"Missing required parameter: '{param}'.", param=param,
                               code="missing_required_parameter")
    if kind == "unsupported_item" and not isinstance(value, dict):
        return invalid_request(f"Invalid type for '{param}': expected an object, but got "
                               f"{type_name(value)}.", param=param, code="invalid_type")
    if kind == "unsupported_item":
        return invalid_request(f"Unsupported input item type {value.get('type')!r} at '{param}'.",
                               param=f"{param}.type", code="unsupported_item")
    if kind == "union_tag_invalid":
        expected = error["msg"].partition("expected tags: ")[2]
        return invalid_request(f"Unsupported '{param}.type' {value.get('type')!r}; expected {expected}.",
                               param=f"{param}.type", code="unsupported_value")
    wanted = [w for e in here if (w := _WANTED.get(e["type"]))] if error["type"] in _WANTED else []
    if wanted:
        return invalid_request(f"Invalid type for '{param}': expected {' or '.join(dict.fromkeys(wanted))}, "
                               f"but got {type_name(value)}.", param=param,
                               code="invalid_type")
    shown = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    message = error["msg"].removeprefix("Value error, ")
    return invalid_request(f"Invalid value for '{param}': {shown[:100]}; {message[0].lower()}{message[1:]}.",
                           param=param, code="invalid_value")


def _path(loc: tuple[Any, ...], body: Any, kind: str) -> list[str | int]:
    """The error's location as a path in `body`: the parts of `loc` that index into it."""
    path: list[str | int] = []
    node = body
    for i, part in enumerate(loc):
        indexes = (isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
                   or isinstance(node, dict) and isinstance(part, str) and part in node)
        if indexes:
            node = node[part]
        elif not (kind == "missing" and i == len(loc) - 1 and isinstance(part, str)):
            continue  # a union member or tag pydantic added (a missing field is not in the body)
        path.append(part)
    return path


def _param(path: list[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text
