"""Where the state that makes turns exact lives: one `Store` interface, the in-process backend and
the Redis one (`redis`) behind it.

Other layers use: `backend` (the `Store` interface and `open_store`), `sessions`, `responses`,
`rollouts`, `conversations` and `observer` (what a shared backend reports)."""
