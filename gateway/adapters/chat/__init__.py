"""The Chat Completions API (POST /v1/chat/completions): a request body in, chunks or a
completion out, vLLM's own extra request fields included."""
