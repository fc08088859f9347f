#!/usr/bin/env bash
# The fuzzing campaign: scripts/fuzz.sh N [SEED [START]] runs cases START..START+N-1
# (default 0..N-1) of campaign SEED (default 0), one child process per case
# (tests/fuzz/harness.py), on one core; a second core runs another shard with another
# START and FUZZ_OUT, and `harness.py --summary DIR1 DIR2` merges them.  It is
# resumable: run it again to continue from .fuzz/state.json; every failing input is saved
# under .fuzz/failures/ (SEED-CASE.json: the failure, its class and the case's bytes);
# `python tests/fuzz/harness.py --seed SEED --case CASE` replays one case in-process.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:?usage: scripts/fuzz.sh N [SEED [START]]}
SEED=${2:-0}
START=${3:-0}
if [ -z "${FASTANE_CORPUS:-}" ] && [ -d ../shared/corpus ]; then
  export FASTANE_CORPUS="$(cd ../shared/corpus && pwd)"
fi
export NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 NUMBA_THREADING_LAYER=workqueue
OUT=${FUZZ_OUT:-.fuzz}
RESUME=
[ -f "$OUT/state.json" ] && RESUME=--resume
exec .venv/bin/python tests/fuzz/harness.py --cases "$N" --seed "$SEED" --start "$START" --out "$OUT" $RESUME
