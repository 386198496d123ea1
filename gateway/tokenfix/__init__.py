"""Exact tokens: the state a turn leaves, splicing, the prompt decision, restoring from ids.

Other layers use: `state` (the exact tokens behind a conversation), `record` (what a model call did),
`prompt` (the one prompt decision), `restore` (tokens of earlier turns from ids sent back),
`client_ids` and `locality`; `_splice` and `_terminators` are this package's own."""
