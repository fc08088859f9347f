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
# Headless Chromium for the HTML report's browser test (tests/model/run/test_page_browser.py),
# from Debian's packages where this runs as root with apt-get; elsewhere that test is skipped
# with its reason.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing chromium and chromium-driver (Debian) for the browser test" >&2
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; } ||
      echo "could not install chromium: the browser test will be skipped" >&2
  else
    echo "chromium is not installed (needs root and apt-get here): the browser test will be skipped" >&2
  fi
fi
if [ -z "${FASTANE_CORPUS:-}" ] && [ -d ../shared/corpus ]; then
  export FASTANE_CORPUS="$(cd ../shared/corpus && pwd)"
fi
# The linter and the formatter (configured in pyproject.toml) first: they take a second.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# A smoke run of the benchmarks (each once, untimed) first, so that a broken benchmark
# fails here; then the unit tests.
.venv/bin/python -m pytest -q bench --benchmark-disable
exec .venv/bin/python -m pytest -q -n 2 "$@"
