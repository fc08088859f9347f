#!/usr/bin/env bash
# The model-file fuzzing campaign: scripts/fuzz_models.sh N [SEED [START]] runs cases
# START..START+N-1 (default 0..N-1) of campaign SEED (default 0): mutated ONNX and Core ML
# files, each run through `fastane run M --random [--report]` and `fastane roofline M` in
# a child process (tests/fuzz/model_harness.py), on one core.  The seeds are built into
# $FUZZ_OUT/seeds (default .fuzz-models) at the first run.  It is resumable: run it again
# to continue from $FUZZ_OUT/state.json; every failing case is saved under
# $FUZZ_OUT/failures/ (SEED-CASE.json: the failure, its class, the case's files and
# mutations); a second core runs another shard with another START and FUZZ_OUT, and
# `model_harness.py --summary DIR1 DIR2` merges them; `model_harness.py --seed SEED --case
# CASE` replays one case in-process.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:?usage: scripts/fuzz_models.sh N [SEED [START]]}
SEED=${2:-0}
START=${3:-0}
export NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 NUMBA_THREADING_LAYER=workqueue
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's fastane
OUT=${FUZZ_OUT:-.fuzz-models}
RESUME=
[ -f "$OUT/state.json" ] && RESUME=--resume
exec "${PYTHON:-.venv/bin/python}" tests/fuzz/model_harness.py --cases "$N" --seed "$SEED" --start "$START" --out "$OUT" $RESUME
