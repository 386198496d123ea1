"""The Responses API: a request body in, a turn's events out.

POST /v1/responses over HTTP, SSE and WebSocket mode, with stored responses, compaction,
conversations and remote MCP tools.

Other layers use: `turn` (a `response.create` as a turn: the builder HTTP and WebSocket mode share),
`events` (the stream events a response writes), `input` (the body read into a conversation),
`resent` (a resent history recognised from its bytes), `stored` (stored responses as the API shows
them), `conversation_items` (the Conversations API's shapes) and `compaction` (POST
/v1/responses/compact). `_output` (the exchange's writer), `_continuation` and `_mcp_tools` are
this package's own."""
