"""/v1/conversations: create, read, update and delete conversations and their items.

A conversation is server-side history that outlives `previous_response_id` chains: a
response created with `conversation` continues its exact tokens and appends its input and
output items (gateway/pipeline/conversations.py). The shapes are OpenAI's
(gateway/adapters/responses/conversation_items.py); pages are newest first unless `order=asc`.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.request_schema import ConversationBody, ConversationUpdateBody, ItemsBody, validate
from gateway.adapters.responses import conversation_items as shapes
from gateway.pipeline import conversations
from gateway.pipeline.runtime import Runtime
from gateway.server.http import JSONResponse, read_json
from gateway.store.conversations import StoredConversation

__all__ = ["create_conversation", "create_items", "delete_conversation", "delete_item", "get_conversation", "get_item",
           "list_items", "update_conversation"]


async def create_conversation(request: Request) -> Response:
    body = validate(ConversationBody, await _body(request))
    items, history = shapes.new_items(body.items, "items", ())
    created = await conversations.create(_runtime(request), body.metadata or {}, items, history)
    return JSONResponse(_shown(created))


async def get_conversation(request: Request) -> Response:
    return JSONResponse(_shown(await conversations.load(_runtime(request), _id(request))))


async def update_conversation(request: Request) -> Response:
    metadata = validate(ConversationUpdateBody, await _body(request)).metadata

    def updated(stored: StoredConversation) -> None:
        stored.metadata = metadata

    return JSONResponse(_shown(await conversations.change(_runtime(request), _id(request), updated)))


async def delete_conversation(request: Request) -> Response:
    await conversations.delete(_runtime(request), _id(request))
    return JSONResponse(shapes.deleted_object(_id(request)))


async def list_items(request: Request) -> Response:
    found = await conversations.load(_runtime(request), _id(request))
    return JSONResponse(shapes.items_page(found.conversation_id, found.items, request.query_params))


async def create_items(request: Request) -> Response:
    body = validate(ItemsBody, await _body(request))
    runtime, conversation_id = _runtime(request), _id(request)
    added: list[dict] = []

    def appended(stored: StoredConversation) -> None:
        items, history = shapes.new_items(body.items, "items", stored.history)
        stored.items += items
        stored.history += history  # the exact tokens stay a prefix of the history
        added[:] = items

    await conversations.change(runtime, conversation_id, appended)
    return JSONResponse({"object": "list", "data": added, "first_id": added[0]["id"] if added else None,
                         "last_id": added[-1]["id"] if added else None, "has_more": False})


async def get_item(request: Request) -> Response:
    found = await conversations.load(_runtime(request), _id(request))
    return JSONResponse(shapes.item_in(found.conversation_id, found.items, request.path_params["item_id"]))


async def delete_item(request: Request) -> Response:
    item_id = request.path_params["item_id"]

    def removed(stored: StoredConversation) -> None:
        gone = shapes.item_in(_id(request), stored.items, item_id)
        stored.items = [item for item in stored.items if item is not gone]
        stored.history = shapes.history_of(stored.items)
        stored.tokens = None  # they were of a history that no longer is: the next prompt is rendered in full

    return JSONResponse(_shown(await conversations.change(_runtime(request), _id(request), removed)))


async def _body(request: Request) -> Any:
    settings = request.app.state.settings
    return await read_json(request, settings.max_body_bytes, settings.request_body_timeout)


def _runtime(request: Request) -> Runtime:
    return request.app.state.runtime


def _id(request: Request) -> str:
    return request.path_params["conversation_id"]


def _shown(stored: StoredConversation) -> dict:
    return shapes.conversation_object(stored.conversation_id, stored.created_at, stored.metadata)
