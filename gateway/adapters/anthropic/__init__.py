"""Anthropic's Messages API (POST /v1/messages): a request body in, message events out."""
