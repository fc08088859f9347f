"""The shapes real models use, against numpy in the same run (the README's speed table;
pytest-benchmark).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python -m pytest bench/bench_speed.py --benchmark-only

* ``test_skinny[M-K]``: ``fastane.matmul(x, W)`` with ``x`` ``(M, K)`` and the weights ``W``
  ``(K, K)`` resident: a model constant (``fastane.constant``, as ``fastane.load_model``
  holds a model's weights: packed into KMem once and known unchanged by identity, no
  per-call compare; docs/lower.md section 5), M = 1 (decode), 8, 64 and K = N = 2048, 4096, against
  numpy float32 BLAS (``x32 @ W32``) and, up to 2**27 MACs, numpy float16 of the same
  product.  Target:
  within 4x of numpy float32 (``speedup_vs_numpy_f32 >= 0.25``).
* ``test_activation_1m[name]``: ``fastane.<name>`` over 2**20 fp16 elements (an
  elementwise program on the device) against its numpy float32 formula.  Target: within
  3x (``speedup_vs_numpy_f32 >= 1/3``).  (GMAC/s in the summary are G elements/s here.)
* ``test_tiny_matmul``: a 4 x 4 ``fastane.matmul`` end to end, against numpy float16.
  Target: at most 60 us per call.

The fastane result is checked first (a few rows against the MAC kernels called directly
on float64 operands; the unit tests check every path against ``tests/helpers/reference.py``), so
a broken path cannot post a fast time.  The machines are shared and noisy: compare the
ratios within one run.
"""

from __future__ import annotations

import numpy as np
import pytest

import fastane
from fastane.kernels import mac

SKINNY = [(m, k) for k in (2048, 4096) for m in (1, 8, 64)]


def _rows_direct(x16, w16, rows):
    """The exact result of ``rows`` of ``x16 @ w16`` by the MAC kernels on float64."""
    a = x16[rows].astype(np.float64)[None]
    b = w16.astype(np.float64)[None]
    z = np.zeros(1, np.int64)
    acc, flag = mac.matmul_q16(a, b, z, z, False)
    y = np.empty(acc.shape)
    mac.readout(acc, flag, y)
    return y[0].astype(np.float16)


@pytest.mark.parametrize("m,k", SKINNY, ids=[f"{m}x{k}x{k}" for m, k in SKINNY])
def test_skinny(benchmark, smoke, measure, compare, note, m, k):
    rng = np.random.default_rng(m * 7 + k)
    w16 = (rng.standard_normal((k, k)) / np.sqrt(k)).astype(np.float16)
    x16 = rng.standard_normal((m, k)).astype(np.float16)
    wc = fastane.constant(w16)  # a model's weight: read-only, fastane's own
    y = fastane.matmul(x16, wc)  # lowers, packs and decodes the weights once
    rows = [0, m - 1]
    assert np.array_equal(y[rows].view(np.uint16), _rows_direct(x16, w16, rows).view(np.uint16))
    w32, x32 = w16.astype(np.float32), x16.astype(np.float32)
    n = 1 if smoke else (15 if k == 2048 else 9)
    t = measure(lambda: fastane.matmul(x16, wc), n)
    baselines = {"numpy_f32": (lambda: x32 @ w32, 3 * n)}
    if m * k * k <= 1 << 27:  # numpy float16 has no BLAS: ~0.1 GMAC/s, seconds per call above
        baselines["numpy_f16"] = (lambda: x16 @ w16, 1 if smoke else 3)
    info = compare(t, m * k * k, baselines)
    note(
        f"skinny {m}x{k}x{k}, weights resident: {t * 1e3:.2f} ms, numpy float32 "
        f"{info['numpy_f32_s'] * 1e3:.2f} ms (fastane x{1 / info['speedup_vs_numpy_f32']:.1f} slower; "
        f"target 4x)"
    )


def _np_act(name):
    return {
        "tanh": np.tanh,
        "relu": lambda x: np.maximum(x, np.float32(0)),
        "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
        "silu": lambda x: x / (1 + np.exp(-x)),
        "gelu": lambda x: (
            0.5 * x * (1 + np.tanh(np.float32(0.7978846) * (x + np.float32(0.044715) * x * x * x)))
        ),
        "exp": np.exp,
    }[name]


@pytest.mark.parametrize("name", ["tanh", "relu", "sigmoid", "silu", "gelu", "exp"])
def test_activation_1m(benchmark, smoke, measure, compare, note, name):
    n = 1 << 20
    x16 = (np.random.default_rng(5).standard_normal(n) * 4).astype(np.float16)
    x32 = x16.astype(np.float32)
    fn = getattr(fastane, name)
    with fastane.errstate(lut_range="ignore", saturation="ignore"), np.errstate(all="ignore"):
        y = fn(x16)
        assert y.shape == x16.shape and y.dtype == np.float16
        f = _np_act(name)
        t = measure(lambda: fn(x16), 1 if smoke else 9)
        info = compare(t, n, {"numpy_f32": (lambda: f(x32), 1 if smoke else 21)})
    note(
        f"{name} on 2^20 elements: {t * 1e3:.2f} ms, numpy float32 {info['numpy_f32_s'] * 1e3:.2f} ms "
        f"(fastane x{1 / info['speedup_vs_numpy_f32']:.1f} slower; target 3x)"
    )


def test_tiny_matmul(benchmark, smoke, measure, compare, note):
    a16 = np.random.default_rng(6).standard_normal((4, 4)).astype(np.float16)
    y = fastane.matmul(a16, a16)
    assert np.array_equal(y.view(np.uint16), _rows_direct(a16, a16, [0, 1, 2, 3]).view(np.uint16))
    for _ in range(20):
        fastane.matmul(a16, a16)
    t = measure(lambda: fastane.matmul(a16, a16), 1 if smoke else 500)
    info = compare(t, 64, {"numpy_f16": (lambda: a16 @ a16, 1 if smoke else 500)})
    benchmark.extra_info["us_per_call"] = t * 1e6
    note(
        f"tiny 4x4 fastane.matmul: {t * 1e6:.0f} us per call (target 60 us; numpy float16 "
        f"{info['numpy_f16_s'] * 1e6:.1f} us)"
    )
