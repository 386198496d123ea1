# `make test` and `make serve` work on a fresh machine: both bootstrap first (idempotent).
.PHONY: bootstrap test serve

bootstrap:
	scripts/bootstrap.sh

# pytest's exit code 5 means "no tests collected": not a failure.
test: bootstrap
	.venv/bin/pytest -q --durations=15 $(PYTEST_ARGS) || [ $$? -eq 5 ]

# With no --upstream the gateway starts a local stock vLLM on the tiny model itself.
serve: bootstrap
	.venv/bin/vllm-gateway serve $(SERVE_ARGS)
