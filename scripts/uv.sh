#!/usr/bin/env bash
# Runs the project's pinned uv (from PyPI, in its own venv cached under
# ${GATEWAY_CACHE_DIR:-~/.cache/vllm-gateway}/uv-VERSION): `scripts/uv.sh lock` re-locks after
# pyproject.toml's dependencies change (`make lock`), bootstrap.sh syncs .venv with it.
set -euo pipefail
PYTHON="${PYTHON:-python3}"
VERSION="${UV_VERSION:-0.13.9}"
VENV="${GATEWAY_CACHE_DIR:-$HOME/.cache/vllm-gateway}/uv-$VERSION"
if [ ! -x "$VENV/bin/uv" ]; then
  # Built aside and moved into place, so concurrent bootstraps never see half a venv.
  tmp="$VENV.tmp.$$"
  rm -rf "$tmp"
  "$PYTHON" -m venv "$tmp" >&2
  "$tmp/bin/pip" install -q "uv==$VERSION" >&2
  mkdir -p "$(dirname "$VENV")"
  mv -T "$tmp" "$VENV" 2>/dev/null || rm -rf "$tmp"
fi
# Never a uv-managed interpreter: the venvs use the machine's $PYTHON.
export UV_PYTHON_DOWNLOADS="${UV_PYTHON_DOWNLOADS:-never}"
exec "$VENV/bin/uv" "$@"
