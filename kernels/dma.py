"""Tile DMA data movement: strided gathers and scatters over the unified-memory bytes.

Pure functions on plain arrays; the front end (``fastane.device.tile_dma``) has already
checked that every byte they touch lies inside the task's BAR region (``extent``
below), so these only build views of ``mem[offset:offset + extent]`` -- numpy re-checks
the strides against that window, so an out-of-range index cannot reach other memory.
The generic copies are numpy's strided loops; fp16 tensors, which the MAC kernels want as
float64, are decoded by the Numba kernels below in the same pass.
"""
import numpy as np
from numba import njit, prange

from .mac import _claim


def extent(shape, strides, itemsize, burst=64):
    """Bytes from the first element to the end of the last row's last 64-byte burst."""
    *outer, w = shape
    last_row = sum((n - 1) * s for n, s in zip(outer, strides[:-1]))
    return last_row + -(-w * itemsize // burst) * burst


def gather(mem, offset, shape, strides, dtype):
    """The tensor of ``shape`` at byte ``offset`` of ``mem`` (byte ``strides``), as float64.

    ``strides[-1]`` is the element size (rows are contiguous).  Integer formats and fp16
    convert exactly.
    """
    dtype = np.dtype(dtype)
    window = mem[offset:offset + extent(shape, strides, dtype.itemsize)]
    view = np.ndarray(shape, dtype, buffer=window, strides=strides)
    return view.astype(np.float64)


def scatter(mem, offset, values, strides, dtype, zero_tail=True, burst=64):
    """Write ``values`` (exactly representable in ``dtype``) at ``offset`` with ``strides``.

    With ``zero_tail`` the bytes from the end of each row to the end of its last 64-byte
    burst are zeroed (the DMA writes whole bursts).
    """
    dtype = np.dtype(dtype)
    shape = values.shape
    size = extent(shape, strides, dtype.itemsize, burst)
    window = mem[offset:offset + size]
    view = np.ndarray(shape, dtype, buffer=window, strides=strides)
    view[...] = values
    row = shape[-1] * dtype.itemsize
    tail = -(-row // burst) * burst - row
    if zero_tail and tail:
        tails = np.ndarray(shape[:-1] + (tail,), np.uint8, buffer=window, offset=row,
                           strides=strides[:-1] + (1,))
        tails[...] = 0


# ---------------------------------------------------------------- fp16 fast paths (Numba)
# The device's TileDMA moves fp16 tensors; the MAC kernels want float64.  These kernels
# read the checked window as uint16 bit patterns and decode them without branches (the
# loops vectorize), bit-identical to ``fastane.kernels.fp16.f16_to_f64`` on all 65,536
# patterns, NaN payloads included (tests/test_device_fastpath.py).

_REBIAS = np.int64(1008 << 52)            # fp16 exponent bias 15 -> float64's 1023
_SUB_BASE = np.int64(1009 << 52)          # float64 pattern of 2**-14
_TWO_M14 = 2.0 ** -14


@njit(inline="always")
def f16_bits_to_f64(h):
    """Exact float64 value of the fp16 pattern ``h`` (0..0xffff), branch-free.

    Normal numbers: the 15 magnitude bits shifted into place plus the exponent rebias;
    inf/NaN (exponent 31) get the rebias twice (31 + 2 x 1008 = 2047, payload kept);
    subnormals: ``2**-14 x (1 + m/1024) - 2**-14 = m x 2**-24`` (exact)."""
    h = np.int64(h)
    a = h & 0x7FFF
    sign = (h & 0x8000) << 48
    bits = (a << 42) + _REBIAS + (np.int64(a >= 0x7C00) * _REBIAS)
    sub = np.float64(np.int64(_SUB_BASE | (a << 42)).view(np.float64) - _TWO_M14).view(np.int64)
    if a < 0x400:
        bits = sub
    return np.int64(bits | sign).view(np.float64)


@njit(cache=True, boundscheck=False)
def gather_f16(mem16, plane, row, out, cmax):
    """``out[c, h, :] = decode(mem16[c*plane + h*row : ... + W])`` (``out`` float64 (C, H, W),
    C-contiguous; ``plane``/``row`` in elements).  ``cmax[c]``: the largest magnitude
    pattern (``bits & 0x7fff``) of channel ``c``: above 0x7c00 it holds a NaN, else its
    decoded value is the channel's max |x| (fp16 magnitudes order like their patterns)."""
    C, H, W = out.shape
    for c in range(C):
        m = 0
        for h in range(H):
            o = c * plane + h * row
            src = mem16[o:o + W]
            dst = out[c, h]
            for k in range(W):
                v = np.int64(src[k])
                dst[k] = f16_bits_to_f64(v)
                m = max(m, v & 0x7FFF)
        cmax[c] = m


@njit(cache=True)
def decode_f16(bits, out):
    """``out[i] = f16_bits_to_f64(bits[i])`` over flat arrays (uint16 -> float64)."""
    for i in range(bits.size):
        out[i] = f16_bits_to_f64(bits[i])


def window(mem, offset, shape, strides, itemsize, burst=64):
    """The bytes a checked transfer spans, ``mem[offset:offset + extent]``."""
    return mem[offset:offset + extent(shape, strides, itemsize, burst)]


def gather_fp16(mem, offset, shape, strides):
    """:func:`gather` of an fp16 ``(C, H, W)`` tensor through the Numba decoder:
    ``(values float64 (C, H, W), cmax int64 (C,))`` (see :func:`gather_f16`), or None
    when the layout does not suit it (odd offset or strides)."""
    c, h, w = shape
    plane, row, item = strides
    if item != 2 or offset % 2 or plane % 2 or row % 2:
        return None
    win = window(mem, offset, shape, strides, 2)
    out = np.empty(shape)
    cmax = np.empty(c, np.int64)
    if out.size:
        gather_f16(win.view(np.uint16), plane // 2, row // 2, out, cmax)
    return out, cmax


@njit(cache=True, boundscheck=False)
def load_lanes(mem, lanes, sources, sizes, kmem):
    """KernelDMA: ``kmem[lanes[i], :sizes[i]] = mem[sources[i]:sources[i] + sizes[i]]`` for
    every lane, in int64 words (``mem`` int64[...] and ``kmem`` int64[16, ...] views of the
    bytes; ``sources`` and ``sizes`` in words; the ranges are checked by the caller's plan).
    Returns whether any word of KMem changed (the copy compares as it goes: one pass)."""
    changed = np.int64(0)
    for i in range(lanes.size):
        src = mem[sources[i]:sources[i] + sizes[i]]
        dst = kmem[lanes[i], :sizes[i]]
        d = np.int64(0)
        for k in range(src.size):
            v = src[k]
            d |= v ^ dst[k]
            dst[k] = v
        changed |= d
    return changed != 0


# ---------------------------------------------------------------- the MAC's im2col operand, from fp16
@njit(inline="always")
def _nan_max(m, v):
    return v if (v > m or v != v) else m


@njit(inline="always")
def _unfold_task(mem16, plane, row, H, W, CG, KH, KW, sy, sx, dy, dx, pad_top, pad_left, oh, ow,
                 cols, tmax, t, line):
    """Input channel ``t`` (group ``t // CG``): decode its rows (``line``: a float64 (H, W)
    buffer of the thread), then unfold them exactly as ``fastane.kernels.conv`` does."""
    g = t // CG
    c = t % CG
    for y in range(H):
        src = mem16[t * plane + y * row:t * plane + y * row + W]
        dst = line[y]
        for k in range(W):
            dst[k] = f16_bits_to_f64(np.int64(src[k]))
    m = 0.0
    for ky in range(KH):
        for kx in range(KW):
            r = cols[g, (c * KH + ky) * KW + kx]
            x0 = kx * dx - pad_left  # input column of ox = 0
            lo = 0 if x0 >= 0 else min(ow, (-x0 + sx - 1) // sx)  # first ox inside
            hi = 0 if W - 1 - x0 < 0 else min(ow, (W - 1 - x0) // sx + 1)  # past the last
            hi = max(hi, lo)
            for oy in range(oh):
                y = oy * sy + ky * dy - pad_top
                dst = r[oy * ow:(oy + 1) * ow]
                if y < 0 or y >= H:
                    dst[:] = 0.0
                    continue
                src = line[y]
                for ox in range(lo):
                    dst[ox] = 0.0
                for ox in range(lo, hi):
                    v = src[ox * sx + x0]
                    dst[ox] = v
                    m = _nan_max(m, abs(v))
                for ox in range(hi, ow):
                    dst[ox] = 0.0
    tmax[t] = m


@njit(parallel=True, cache=True, boundscheck=False)
def unfold_f16(mem16, plane, row, H, W, CG, KH, KW, sy, sx, dy, dx, pad_top, pad_left, oh, ow,
               cols, tmax, workers):
    """TileDMASrc straight into the MAC's im2col operand: ``cols[g, (c*KH + ky)*KW + kx,
    oy*ow + ox]`` = the fp16 input (``mem16[ch*plane + y*row + x]``, ``ch = g*CG + c``,
    ``plane``/``row`` in elements) at ``y = oy*sy + ky*dy - pad_top``, ``x = ox*sx + kx*dx -
    pad_left``, or 0 outside the input; ``tmax[ch]`` = max |value| written (NaN if one is
    NaN).  The same values, in the same places, as ``fastane.kernels.conv``'s ``_im2col``
    of the decoded input, without the decoded input: one task per input channel, handed
    out through the MAC kernels' work queue."""
    ntasks = tmax.size
    counter = np.zeros(1, np.int64)
    for _ in prange(workers):
        line = np.empty((H, W))
        while True:
            t = _claim(counter)
            if t >= ntasks:
                break
            _unfold_task(mem16, plane, row, H, W, CG, KH, KW, sy, sx, dy, dx, pad_top, pad_left,
                         oh, ow, cols, tmax, t, line)
