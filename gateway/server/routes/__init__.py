"""The route handlers: an HTTP or WebSocket request → its adapter → the session pipeline."""
