"""The HTTP server: the ASGI app, what its endpoints share, and the routes.

Other layers use: `app` (the ASGI application), `http` (JSON and SSE responses, error handlers),
`auth`, `drain`, `tenant_limits`, `slow_clients` (uvicorn's settings and the header bounds),
`tracing` and `otlp` (trace export), `body_writer` (a streaming body without an ASGI send per
token) and the handlers in `routes`. The `_`-named modules (metrics, the status page, OpenAPI,
admission and the gate, observation, event logs, body decoding, WebSocket frames) are the server's
own."""
