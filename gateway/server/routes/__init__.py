"""The route handlers: an HTTP or WebSocket request → its adapter → the session pipeline.

`app` mounts every one of them: `responses`, `compact`, `stored_responses`, `conversations`, `chat`,
`messages`, `token_in`, `tokenize`, `rollouts`, `control` and `websocket`."""
