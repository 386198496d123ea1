"""The Responses API (POST /v1/responses over HTTP, SSE and WebSocket mode; stored responses,
compaction, conversations, remote MCP tools): a request body in, a turn's events out."""
