# `make serve`, `make test` and `make demo-codex` work on a fresh machine: each bootstraps
# first (idempotent). Only the tests and demo-codex need Node/npm (the Codex CLI).
.PHONY: bootstrap bootstrap-codex lock test serve demo-codex

bootstrap:
	scripts/bootstrap.sh

bootstrap-codex:
	scripts/bootstrap.sh --with-codex

# After changing pyproject.toml's dependencies: resolve them again into uv.lock (commit both).
# `make lock LOCK_ARGS=--upgrade` moves every pin to the newest allowed version.
lock:
	scripts/uv.sh lock --python $${PYTHON:-python3} $(LOCK_ARGS)

# pytest's exit code 5 means "no tests collected": not a failure. Two xdist workers: the
# real-vLLM tests on one, the rest beside them (tests/conftest.py); TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
test: bootstrap-codex
	.venv/bin/pytest -q -n $(TEST_WORKERS) --dist loadgroup --max-worker-restart 0 --durations=15 $(PYTEST_ARGS) || [ $$? -eq 5 ]

# With no --upstream the gateway starts a local stock vLLM on the tiny model itself.
serve: bootstrap
	.venv/bin/vllm-gateway serve $(SERVE_ARGS)

# The demo, then one real Codex turn against it with docs/codex.md's config (examples/codex/).
demo-codex: bootstrap-codex
	scripts/demo-codex.sh $(CODEX_ARGS)
