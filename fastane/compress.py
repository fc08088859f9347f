"""Weight compression for the numpy surface: :func:`palettize` and :func:`quantize`.

Both return a :class:`~fastane.lower.compressed.PalettizedWeight` (``bits``-bit codes into
an fp16 palette) that :func:`fastane.conv1d`, :func:`fastane.conv2d` and :func:`fastane.linear` accept as their
``weight``: the lowering keeps it compressed in KMem (the NE's palettized kernels,
``NE.KernelCfg.PalettizedEn``; docs/numerics.md, "Compressed kernels"), so KernelDMA moves
the codes and the palette, not fp16 weights, and the result is bit for bit that of the same
call with ``weight.decompress()``.

* :func:`palettize` ``(w, bits)``: a palette of at most ``2**bits`` fp16 values (1-D k-means
  on the fp16 weights, deterministic; lossless when the weight has no more distinct values
  than that), or the ``palette`` given.
* :func:`quantize` ``(w, dtype="int8")``: linear per-tensor quantization ``w ~ scale * (q -
  zero_point)`` with integers ``q`` of the dtype's range (int8: symmetric, ``zero_point``
  0; uint8: ``zero_point`` from the range); the device dequantizes through the 8-bit
  palette ``fp16(scale * (i - zero_point))``.  ``scale``/``zero_point`` may be given.

Per-channel palettes or scales are not supported (one palette per tensor).
"""

from __future__ import annotations

import numbers

import numpy as np

from .lower.compressed import PalettizedWeight
from .lower.problems import linear_problem
from .operands import fp16_operand

__all__ = ["palettize", "quantize", "PalettizedWeight"]

#: Lloyd iterations of the 1-D k-means of :func:`palettize`
KMEANS_ITERATIONS = 32


def _bits(bits, func: str) -> int:
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral):
        raise TypeError(f"{func}: bits must be an int, got {bits!r}")
    if not 1 <= bits <= 8:
        raise ValueError(f"{func}: bits must be 1 to 8 (the NE's palettized codes), got {bits}")
    return int(bits)


def _weight(w, func: str) -> np.ndarray:
    w16 = fp16_operand(w, func, "w")
    if w16.size == 0:
        raise ValueError(f"{func}: w is empty")
    if not np.isfinite(w16).all():
        raise ValueError(f"{func}: w must be finite (a NaN or inf weight has no place in a palette)")
    return w16


def _nearest(values: np.ndarray, palette: np.ndarray) -> np.ndarray:
    """Index of the nearest palette entry to each value (ties: the lower entry)."""
    order = np.argsort(palette.astype(np.float64), kind="stable")
    p = palette.astype(np.float64)[order]
    mid = (p[1:] + p[:-1]) / 2
    return order[np.searchsorted(mid, values.astype(np.float64), side="left")]


def palettize(w, bits: int, *, palette=None) -> PalettizedWeight:
    """``w`` as ``bits``-bit codes into an fp16 palette of ``2**bits`` entries.

    Without ``palette``: the distinct fp16 values of ``w`` when there are at most
    ``2**bits`` (lossless), else a 1-D k-means of them (centroids started at evenly spaced
    quantiles, :data:`KMEANS_ITERATIONS` Lloyd steps, rounded to fp16).  With ``palette``
    (at most ``2**bits`` values, rounded to fp16): each weight takes its nearest entry.
    Unused entries are 0."""
    func = "palettize"
    bits = _bits(bits, func)
    w16 = _weight(w, func)
    k = 1 << bits
    if palette is not None:
        pal = fp16_operand(palette, func, "palette").reshape(-1)
        if not 1 <= pal.size <= k or not np.isfinite(pal).all():
            raise ValueError(f"{func}: palette must hold 1 to {k} finite values for {bits}-bit codes")
    else:
        uniq = np.unique(w16.astype(np.float64))
        if uniq.size <= k:
            pal = uniq.astype(np.float16)
        else:
            flat = np.sort(w16.astype(np.float64).reshape(-1))
            cent = flat[((np.arange(k) + 0.5) * flat.size / k).astype(np.int64)]
            for _ in range(KMEANS_ITERATIONS):
                mid = (cent[1:] + cent[:-1]) / 2
                idx = np.searchsorted(mid, flat, side="left")
                sums = np.bincount(idx, weights=flat, minlength=k)
                counts = np.bincount(idx, minlength=k)
                new = np.where(counts > 0, sums / np.maximum(counts, 1), cent)
                new.sort()
                if np.array_equal(new, cent):
                    break
                cent = new
            pal = np.unique(cent.astype(np.float16).astype(np.float64)).astype(np.float16)
    full = np.zeros(k, np.float16)
    full[: pal.size] = pal
    codes = _nearest(w16, pal).astype(np.uint8).reshape(w16.shape)
    return PalettizedWeight(codes, full, bits)


def quantize(w, *, dtype="int8", scale=None, zero_point=None) -> PalettizedWeight:
    """Linear per-tensor quantization of ``w`` to ``dtype`` ("int8" or "uint8"):
    ``q = clip(round(w / scale) + zero_point)`` (ties to even), ``w ~ scale * (q - zero_point)``.

    Defaults: int8 is symmetric (``scale = max|w| / 127``, ``zero_point = 0``); uint8 maps
    ``[min(w, 0), max(w, 0)]`` onto ``[0, 255]``.  The result keeps ``q`` (``.values()``),
    ``scale`` and ``zero_point``; on the device it is the 8-bit palettized kernel whose
    palette is ``fp16(scale * (i - zero_point))`` for every integer ``i`` of the dtype."""
    func = "quantize"
    if dtype not in ("int8", "uint8", np.int8, np.uint8):
        raise ValueError(f"{func}: dtype must be 'int8' or 'uint8', got {dtype!r}")
    dt = np.dtype(dtype)
    info = np.iinfo(dt)
    w16 = _weight(w, func)
    x = w16.astype(np.float64)
    if scale is None:
        if dt == np.int8:
            top = float(np.abs(x).max())
            scale = top / 127 if top else 1.0
        else:
            lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
            scale = (hi - lo) / 255 if hi > lo else 1.0
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not np.isfinite(scale) or scale <= 0:
        raise ValueError(f"{func}: scale must be a finite positive number, got {scale!r}")
    scale = float(scale)
    if zero_point is None:
        zero_point = 0 if dt == np.int8 else int(np.clip(np.rint(-min(float(x.min()), 0.0) / scale), 0, 255))
    if isinstance(zero_point, bool) or not isinstance(zero_point, numbers.Integral):
        raise TypeError(f"{func}: zero_point must be an int, got {zero_point!r}")
    if not info.min <= zero_point <= info.max:
        raise ValueError(f"{func}: zero_point must be in [{info.min}, {info.max}] for {dt}, got {zero_point}")
    q = np.clip(np.rint(x / scale) + zero_point, info.min, info.max).astype(dt)
    ints = np.arange(256, dtype=np.uint8).view(dt).astype(np.float64)  # code c holds the integer c's bits
    with np.errstate(over="ignore"):
        pal = (scale * (ints - zero_point)).astype(np.float16)
    return PalettizedWeight(q.view(np.uint8), pal, 8, "quantized", scale, int(zero_point), dt.name)


def lossless(w16: np.ndarray):
    """``w16`` (fp16) as a :class:`PalettizedWeight` of its own distinct bit patterns when it
    has at most 256 of them and the codes and a palette a core (16 cores) take fewer bytes
    than the fp16 weight; else ``w16`` itself.  Lossless: ``decompress()`` gives back every
    bit pattern.  What a dequantized (ONNX QDQ) or palettized model's constant weights
    become on the ANE (:mod:`fastane.model.placement.rules`)."""
    w16 = np.asarray(w16)
    if w16.dtype != np.float16 or w16.size == 0:
        return w16
    patterns, codes = np.unique(np.ascontiguousarray(w16).view(np.uint16).reshape(-1), return_inverse=True)
    if patterns.size > 256 or not np.isfinite(patterns.view(np.float16)).all():
        return w16
    bits = max(1, int(patterns.size - 1).bit_length())
    if w16.size * bits // 8 + 16 * (2 << bits) >= 2 * w16.size:
        return w16
    palette = np.zeros(1 << bits, np.uint16)
    palette[: patterns.size] = patterns
    return PalettizedWeight(codes.astype(np.uint8).reshape(w16.shape), palette.view(np.float16), bits)


def linear(x16: np.ndarray, weight: PalettizedWeight, b16, activation, run_conv):
    """``fastane.linear`` with a compressed weight ``(out_features, in_features)``: the 1x1
    convolution of :func:`fastane.lower.problems.linear_problem` (``x^T`` as ``(1, K, 1, M)``) with
    the codes kept compressed."""
    N, K = weight.shape
    batch = x16.shape[:-1]
    c = linear_problem(x16.shape, N, b16 is not None, activation, weight.bits)
    xc = np.ascontiguousarray(x16.reshape(c.w, K).T).reshape(c.n, c.cin, c.h, c.w)
    y, stats, _ = run_conv(
        xc, weight.reshaped((c.cout, c.cin, c.kh, c.kw)), b16, activation=activation, stats_only=False
    )
    return np.ascontiguousarray(y.reshape(N, c.w).T).reshape(batch + (N,)), stats
