"""``fastane demo``: the ANE accumulator saturating where a CPU would not, and throughput.

Runs the SPEC's accumulator probe (a dot product of 256 equal products ``v`` with a
vector of ones) through :func:`fastane.matmul` beside a CPU fp16 computation, then times
an exact fp16 matmul against numpy's float16 and float32 matmuls in the same run.
"""

from __future__ import annotations

import time

import numpy as np

PROBE = (127.9375, 128.0, -128.0, -128.125)


def add_arguments(parser) -> None:
    parser.add_argument(
        "--size",
        type=int,
        default=512,
        metavar="N",
        help="matmul size N for the throughput part (N x N x N; default 512)",
    )
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions (median; default 5)")


def _median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def run(args) -> int:
    import fastane

    print("The ANE accumulator (signed Q16.16) saturates where a CPU would not.")
    print("Probe: sum of 256 equal products v (a dot product with a vector of ones)\n")
    print(f"{'v':>10} {'exact sum':>10} {'CPU fp16':>16} {'fastane (ANE)':>18}")
    ones = np.ones(256, np.float16)
    with fastane.errstate(saturation="ignore"):
        for v in PROBE:
            cpu = np.float16(np.sum(np.full(256, v, np.float64)))
            ane = fastane.matmul(np.full(256, v, np.float16), ones)
            mark = "  <- saturated" if fastane.last_stats().saturated else ""
            print(
                f"{v:>10} {256 * v:>10g} {f'0x{int(cpu.view(np.uint16)):04x} ({cpu:g})':>16} "
                f"{f'0x{int(ane.view(np.uint16)):04x} ({ane:g})':>18}{mark}"
            )

    n = args.size
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float16)
    b = rng.standard_normal((n, n)).astype(np.float16)
    fastane.matmul(a, b)  # compile / load from cache
    macs = n**3
    t_ane = _median_seconds(lambda: fastane.matmul(a, b), args.repeat)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    t_f32 = _median_seconds(lambda: a32 @ b32, args.repeat)
    m16 = min(n, 256)  # numpy's float16 matmul has no BLAS: keep it short
    t_f16 = _median_seconds(lambda: a[:m16, :m16] @ b[:m16, :m16], max(1, args.repeat // 2)) * (n / m16) ** 3
    print(f"\nThroughput, {n}x{n}x{n} matmul (median of {args.repeat}; this machine, this run):")
    print(f"  fastane exact ANE fp16   {macs / t_ane / 1e9:8.2f} GMAC/s")
    print(
        f"  numpy float16 matmul     {macs / t_f16 / 1e9:8.2f} GMAC/s   "
        f"(fastane is {t_f16 / t_ane:.1f}x faster{'; timed at 256^3 and scaled' if m16 < n else ''})"
    )
    print(
        f"  numpy float32 BLAS       {macs / t_f32 / 1e9:8.2f} GMAC/s   (inexact: no fp16 rounding, no saturation)"
    )
    return 0
