"""The Redis backends of the stores (`--state-url`): shared by every gateway process and pod.

Other layers use: `backend`, `conversations` and `limits` (the Redis side of each store), `url` (what
a `--state-url` names), `link` (one client, its deadlines) and `keys` (key names); `_rollouts` and
`_codec` are the backends' own."""
