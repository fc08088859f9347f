#!/usr/bin/env bash
# The main job: set up a virtual environment (if needed), install fastane, compile the
# kernels the demo needs into Numba's cache on every core (fastane warm: a first run
# otherwise compiles them one after the other), show the ANE accumulator and throughput
# (fastane demo), the roofline of the default workloads, then a small ResNet-style ONNX
# model (built offline by fastane.model.zoo) through fastane run --report (and its HTML page,
# .demo/report.html) and fastane roofline; last, fastane eval of a classifier trained on
# scikit-learn's digits over its held-out digits (one worker process per core).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[onnx,report,eval,digits]'
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
.venv/bin/fastane roofline .demo/resnet.onnx --summary
echo
.venv/bin/python -m fastane.model.zoo digits .demo/digits
exec .venv/bin/fastane eval .demo/digits/digits.onnx .demo/digits/digits-heldout.npz \
  --labels .demo/digits/digits-heldout.npz:labels --report
