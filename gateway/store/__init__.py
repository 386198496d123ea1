"""Where the state that makes turns exact lives: one `Store` interface, two backends.

The in-process backend is the default; the Redis one (`redis`, `--state-url`) is shared by every
gateway process and pod.

Other layers use: `backend` (the `Store` interface and `open_store`), `sessions`, `responses`,
`rollouts`, `conversations` and `observer` (what a shared backend reports)."""
