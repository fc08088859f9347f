"""Every pair of fp16 patterns through the planar add, subtract and multiply: the
float32 kernel (fastane.kernels.planar_f32) against the float64 one (planar.
eltwise_window), bit for bit and NaN count for NaN count -- 3 x 2**32 results, about
5 s an operation on one core::

    .venv/bin/python scripts/check_planar_f32.py [add|sub|mul ...]

Prints the number of pairs that differ (0 expected) per operation; exits non-zero if any do.
"""

import sys
import time

import numpy as np

from fastane.kernels import planar, planar_f32

OPS = {"add": planar.OP_ADD, "sub": planar.OP_SUB, "mul": planar.OP_MUL}


def main(names):
    bad_total = 0
    a = np.arange(1 << 16, dtype=np.uint16)
    d1, d2 = np.empty_like(a), np.empty_like(a)
    for name in names or list(OPS):
        op = OPS[name]
        t0, bad = time.perf_counter(), 0
        for q in range(1 << 16):
            b = np.full(a.size, q, np.uint16)
            n1 = planar.eltwise_window(
                a, 0, 0, 1, b, 0, 0, 1, 1, 1, a.size, op, 1.0, 1.0, 0.0, d1, 0, 0, a.size
            )
            n2 = planar_f32.binary_window(
                a,
                0,
                0,
                1,
                b,
                0,
                0,
                1,
                1,
                1,
                a.size,
                op == planar.OP_MUL,
                op == planar.OP_SUB,
                1.0,
                1.0,
                d2,
                0,
                0,
                a.size,
            )
            bad += int(np.count_nonzero(d1 != d2)) + (n1 != n2)
        print(f"{name}: {bad} of 2**32 pairs differ ({time.perf_counter() - t0:.0f} s)")
        bad_total += bad
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
