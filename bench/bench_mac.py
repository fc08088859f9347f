"""Benchmarks of the MAC kernels: exact ANE fp16 matmul and conv vs numpy, in one run.

Run: ``.venv/bin/python -m pytest bench/bench_mac.py --benchmark-only`` (see README.md).
The fastane figure is the kernel path the front end runs: ``matmul_q16`` / ``conv2d_q16``
then ``readout`` (operands already exact fp16 values in float64).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

from fastane.kernels import conv, mac

RNG_SEED = 0
# rounds per size: (fastane, numpy float16, numpy float32)
MATMUL_ROUNDS = {256: (21, 5, 21), 512: (11, 3, 11), 1024: (7, 3, 7)}


def fp16_normal(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16)


def _sample_check(acc, flag, a64, b64, rows):
    """A few rows recomputed independently (numpy, any order: no saturation here)."""
    assert not flag.any()
    for i in rows:
        want = np.rint(a64[i][:, None] * b64 * 65536.0).sum(axis=0)
        assert np.array_equal(acc[i], want)


@pytest.mark.parametrize("n", sorted(MATMUL_ROUNDS))
def test_matmul(n, measure, compare):
    rng = np.random.default_rng(RNG_SEED)
    a16, b16 = fp16_normal(rng, (n, n)), fp16_normal(rng, (n, n))
    a, b = a16.astype(np.float64)[None], b16.astype(np.float64)[None]
    z = np.zeros(1, np.int64)
    out = np.empty(n * n)

    def fastane_matmul():
        acc, flag = mac.matmul_q16(a, b, z, z, False)
        mac.readout(acc.reshape(-1), flag.reshape(-1), out)
        return acc, flag

    acc, flag = fastane_matmul()
    _sample_check(acc[0], flag[0], a[0], b[0], rows=[0, n // 2, n - 1])
    r_ane, r16, r32 = MATMUL_ROUNDS[n]
    t = measure(fastane_matmul, r_ane)
    a32, b32 = a16.astype(np.float32), b16.astype(np.float32)
    compare(t, n**3, {"numpy_f16": (lambda: a16 @ b16, r16), "numpy_f32": (lambda: a32 @ b32, r32)})


def test_matmul_saturating_512(measure, compare):
    """Every row's cheap bound fails and many outputs clamp: bounds, BLAS refinement,
    and the exact (per-step clamped) kernels do the work."""
    n = 512
    rng = np.random.default_rng(RNG_SEED)
    a16, b16 = fp16_normal(rng, (n, n), 40.0), fp16_normal(rng, (n, n), 40.0)
    a, b = a16.astype(np.float64)[None], b16.astype(np.float64)[None]
    z = np.zeros(1, np.int64)
    out = np.empty(n * n)

    def fastane_matmul():
        acc, flag = mac.matmul_q16(a, b, z, z, False)
        mac.readout(acc.reshape(-1), flag.reshape(-1), out)
        return acc, flag

    acc, flag = fastane_matmul()
    assert 0.05 < np.mean(flag != 0) < 0.95  # a real mix of clamped and unclamped outputs
    t = measure(fastane_matmul, 5)
    a32, b32 = a16.astype(np.float32), b16.astype(np.float32)
    compare(t, n**3, {"numpy_f16": (lambda: a16 @ b16, 3), "numpy_f32": (lambda: a32 @ b32, 11)})


def _im2col_f32(x32, kh, kw, pad):
    xp = np.pad(x32, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))  # N C OH OW KH KW
    n, c, oh, ow = win.shape[:4]
    return np.ascontiguousarray(win[0].transpose(0, 3, 4, 1, 2)).reshape(c * kh * kw, oh * ow)


def test_conv_resnet50_3x3(measure, compare):
    """ResNet-50 conv2_x 3x3 layer: 1x64x56x56 input, 64 filters 3x3, stride 1, pad 1."""
    rng = np.random.default_rng(RNG_SEED)
    N, C, H, W, CO, K = 1, 64, 56, 56, 64, 3
    x16 = fp16_normal(rng, (N, C, H, W))
    w16 = fp16_normal(rng, (CO, C, K, K), scale=1 / 24)  # ~unit-variance outputs
    x, w = x16.astype(np.float64), w16.astype(np.float64)
    out = np.empty(N * CO * H * W)

    def fastane_conv():
        acc, flag = conv.conv2d_q16(x, w, 1, 1, 1, 1, 1, 1, H, W, 1, False)
        mac.readout(acc.reshape(-1), flag.reshape(-1), out)
        return acc, flag

    acc, flag = fastane_conv()
    cols = _im2col_f32(x16.astype(np.float32), K, K, 1).astype(np.float64)
    wm = w[:, :, :, :].reshape(CO, C * K * K)
    _sample_check(acc[0].reshape(CO, H * W), flag[0].reshape(CO, H * W), wm, cols, rows=[0, 31, 63])
    t = measure(fastane_conv, 11)
    macs = N * CO * H * W * C * K * K
    x32, w32 = x16.astype(np.float32), w16.astype(np.float32).reshape(CO, C * K * K)
    cols32 = _im2col_f32(x32, K, K, 1)
    cols16, w16m = cols32.astype(np.float16), w16.reshape(CO, C * K * K)
    compare(
        t,
        macs,
        {
            "numpy_f16_matmul": (lambda: w16m @ cols16, 3),  # the same MACs as one fp16 matmul
            "numpy_f32_matmul": (lambda: w32 @ cols32, 11),  # ... as one float32 BLAS matmul
            "numpy_f32_im2col_matmul": (lambda: w32 @ _im2col_f32(x32, K, K, 1), 11),
        },
    )


STARTUP_SCRIPT = textwrap.dedent("""
    import json, time
    t0 = time.perf_counter()
    import numpy as np
    import fastane
    from fastane.kernels import conv, mac
    t_import = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    z = np.zeros(1, np.int64)
    a = rng.standard_normal((1, 64, 64)).astype(np.float16).astype(np.float64)
    out = np.empty(64 * 64)
    def first(fn):
        t = time.perf_counter(); fn(); return time.perf_counter() - t
    def mm(x):
        acc, flag = mac.matmul_q16(x, x, z, z, False)
        mac.readout(acc.reshape(-1), flag.reshape(-1), out)
    t_fast = first(lambda: mm(a))           # fast path
    t_exact = first(lambda: mm(a * 1000))   # saturating: bounds + exact paths
    x = rng.standard_normal((1, 8, 16, 16)).astype(np.float16).astype(np.float64)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float16).astype(np.float64)
    t_conv = first(lambda: conv.conv2d_q16(x, w, 1, 1, 1, 1, 1, 1, 16, 16, 1, False))
    print(json.dumps(dict(import_s=t_import, first_matmul_s=t_fast, first_saturating_matmul_s=t_exact,
                          first_conv_s=t_conv)))
""")


def _run_python(code, env=None):
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return proc.stdout


def test_startup_and_compile_time(benchmark, smoke, note):
    """Cold ``import fastane`` (a fresh interpreter; Numba cache as installed), and first-call
    times with an empty Numba cache (compilation) and with that cache filled (loading)."""
    import time

    def cold_import():
        _run_python("import fastane")

    benchmark.pedantic(cold_import, rounds=1 if smoke else 5, iterations=1, warmup_rounds=0 if smoke else 1)
    t0 = time.perf_counter()
    _run_python("pass")
    python_startup = time.perf_counter() - t0
    t0 = time.perf_counter()
    _run_python("import numpy, numba")
    numpy_numba_import = time.perf_counter() - t0
    info = {"python_startup_s": python_startup, "import_numpy_numba_s": numpy_numba_import}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        cold = json.loads(_run_python(STARTUP_SCRIPT, env))  # empty cache: compiles, fills it
        warm = json.loads(_run_python(STARTUP_SCRIPT, env))  # loads from the cache
    info.update({f"cold_cache_{k}": v for k, v in cold.items()})
    info.update({f"warm_cache_{k}": v for k, v in warm.items()})
    benchmark.extra_info.update(info)
    if not smoke:
        note(f"  {'cold import fastane (subprocess, median)':<42} {benchmark.stats.stats.median:8.3f} s")
    for k, v in info.items():
        note(f"  {k:<42} {v:8.3f} s")
