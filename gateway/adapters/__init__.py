"""API shapes ⇄ the canonical turn: one sub-package per API, and what several APIs share.

The APIs: `responses`, `chat` and `anthropic`, each a request body in, its events out.

Other layers use: `request_schema` (the typed request models), `validation` (400s in the API's own
shape), `turns` (the builders of Chat, Messages and token-in turns), `token_in` and `tokenize` (vLLM's
token-in and /tokenize bodies), `rollout_fields` and `rollout_export` (RL fields in, trajectories out),
`reasoning_blob` (reasoning carried in `encrypted_content`) and `codex_catalog` (Codex's model entry).
The `_`-named modules are the APIs' shared parts (tools, sampling, images, logprobs, generation
fields), for this package alone."""
