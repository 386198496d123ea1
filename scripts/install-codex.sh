#!/usr/bin/env bash
# Installs the real Codex CLI from npm into a cache dir keyed by version; prints the binary's path.
set -euo pipefail
CODEX_VERSION="${CODEX_VERSION:-0.171.0}"
PREFIX="${CODEX_PREFIX:-${GATEWAY_CACHE_DIR:-$HOME/.cache/vllm-gateway}/codex-$CODEX_VERSION}"
BIN="$PREFIX/node_modules/.bin/codex"

if [ ! -f "$PREFIX/.complete" ]; then
  rm -rf "$PREFIX"
  mkdir -p "$PREFIX"
  # --no-update-notifier: npm's "new major version available" notice is not the project's business.
  npm install --prefix "$PREFIX" --no-audit --no-fund --no-update-notifier --loglevel=error \
    "@openai/codex@$CODEX_VERSION" >&2
  "$BIN" --version >&2
  touch "$PREFIX/.complete"
fi
echo "$BIN"
