"""Anthropic's Messages API (POST /v1/messages): a request body in, message events out.

Other layers use: `input` (the body read into a conversation) and `output` (the message, or its SSE
events, as the exchange's writer)."""
