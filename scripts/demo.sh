#!/usr/bin/env bash
# The main job: set up a virtual environment (if needed), install fastane, show the ANE
# accumulator and throughput (fastane demo), then the roofline of the default workloads.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
.venv/bin/fastane demo "$@"
echo
exec .venv/bin/fastane roofline --summary --quiet
