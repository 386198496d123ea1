"""The Chat Completions API (POST /v1/chat/completions): a body in, chunks or a completion out.

Other layers use: `input` (the body read into a conversation) and `output` (the completion, or its
chunks, as the exchange's writer); `_vllm_fields` (vLLM's own extra request fields) is this
package's own."""
