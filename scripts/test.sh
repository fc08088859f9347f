#!/usr/bin/env bash
# The README's test command: set up a virtual environment (if needed), install fastane
# with its test extra, smoke-run the benchmarks, run the tests.  FASTANE_CORPUS points
# the corpus tests at the real M1 programs (default: ../shared/corpus beside this
# checkout, when present).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
if [ -z "${FASTANE_CORPUS:-}" ] && [ -d ../shared/corpus ]; then
  export FASTANE_CORPUS="$(cd ../shared/corpus && pwd)"
fi
# The linter and the formatter (configured in pyproject.toml) first: they take a second.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# A smoke run of the benchmarks (each once, untimed) first, so that a broken benchmark
# fails here; then the unit tests.
.venv/bin/python -m pytest -q bench --benchmark-disable
exec .venv/bin/python -m pytest -q "$@"
