#!/usr/bin/env bash
# The main job: set up a virtual environment (if needed), install fastane, compile the
# kernels the demo needs into Numba's cache on every core (fastane warm: a first run
# otherwise compiles them one after the other), show the ANE accumulator and throughput
# (fastane demo), the roofline of the default workloads, then a small ResNet-style ONNX
# model (built offline by fastane.model.zoo) through fastane run --report (and its HTML page,
# .demo/report.html) and fastane roofline.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[onnx,report]'
.venv/bin/fastane warm || echo "fastane warm skipped some kernels (above): they compile on first use"
echo
.venv/bin/fastane demo "$@"
echo
.venv/bin/fastane roofline --summary --quiet
echo
mkdir -p .demo
.venv/bin/python -m fastane.model.zoo resnet .demo/resnet.onnx
.venv/bin/fastane run .demo/resnet.onnx --random --shape x=1x3x32x32 --report --html .demo/report.html
echo
exec .venv/bin/fastane roofline .demo/resnet.onnx --summary
