"""Which Numba functions compile during a fastane command, with which signatures, for how long.

Runs ``fastane ARGS...`` (the CLI, in this process) with a listener on Numba's
``numba:compile`` event (fired only for a real compilation, not for a load from the
cache) and prints one row per function: its signatures and the CPU seconds of the
compiling thread (load on the machine does not inflate them), exclusive of nested
compilations (a callee compiled while its caller compiles is its own row), with the two
front-end passes that took longest (Numba's wall-clock pass timings; ``native_lowering`` and ``native_parfor_lowering``
include LLVM)::

    NUMBA_CACHE_DIR=$(mktemp -d) .venv/bin/python scripts/compile_profile.py demo
    .venv/bin/python scripts/compile_profile.py --json out.json run model.onnx --random ...

With ``--json FILE`` the rows are also written there (a list of dicts).
"""

import json
import sys
import time

from numba.core import event

from numba_compiles import Compiles


def main(argv):
    out = None
    if argv[:1] == ["--json"]:
        out, argv = argv[1], argv[2:]
    listener = Compiles()
    event.register("numba:compile", listener)
    from fastane.cli import main as cli_main

    t0 = time.perf_counter()
    try:
        cli_main(argv)
    except SystemExit as e:  # the CLI's own exit, keep the table
        if e.code not in (None, 0):
            raise
    wall = time.perf_counter() - t0
    rows = sorted(listener.rows.items(), key=lambda kv: -kv[1]["seconds"])
    total = sum(r["seconds"] for _, r in rows)
    print(f"\n{'seconds':>8}  {'n':>3}  function (signatures)", file=sys.stderr)
    for name, r in rows:
        sigs = "; ".join(r["signatures"])
        top = sorted(r.get("passes", {}).items(), key=lambda kv: -kv[1])[:2]
        top = ", ".join(f"{k} {v:.1f}" for k, v in top)
        print(f"{r['seconds']:8.2f}  {len(r['signatures']):3d}  {name}  [{top}]  {sigs}", file=sys.stderr)
    n = sum(len(r["signatures"]) for _, r in rows)
    print(f"{total:8.2f}  {n:3d}  total compile ({wall:.2f} s wall)", file=sys.stderr)
    if out:
        with open(out, "w") as f:
            json.dump([{"function": k, **v} for k, v in rows] + [{"wall": wall}], f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
