#!/usr/bin/env bash
# Installs the RL frameworks' client libraries the tests drive through the gateway (verifiers,
# rLLM's model gateway) into their own virtualenv, cached by version; prints the venv path.
# Their own venv: their pins (mcp < 2, datasets, …) stay out of the gateway's environment.
set -euo pipefail
VERIFIERS_VERSION="${VERIFIERS_VERSION:-0.3.1}"
RLLM_GATEWAY_VERSION="${RLLM_GATEWAY_VERSION:-0.1.0}"
VENV="${RL_CLIENTS_VENV:-${GATEWAY_CACHE_DIR:-$HOME/.cache/vllm-gateway}/rl-clients-verifiers-$VERIFIERS_VERSION-rllm-$RLLM_GATEWAY_VERSION}"

if [ -x "$VENV/bin/python" ] && [ -f "$VENV/.complete" ]; then
  echo "$VENV"; exit 0
fi
rm -rf "$VENV"
"${PYTHON:-python3}" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip >&2
"$VENV/bin/pip" install -q "verifiers==$VERIFIERS_VERSION" "rllm-model-gateway==$RLLM_GATEWAY_VERSION" >&2
"$VENV/bin/python" -c "import verifiers, rllm_model_gateway" >&2
touch "$VENV/.complete"
echo "$VENV"
