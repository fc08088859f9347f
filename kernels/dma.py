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

from .conv import unfold_channel
from .fp16 import f16_to_f64
from .parallel import QUEUE, call_native, claim, native_entry, new_queue
from .simd import wide_vectors


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
    window = mem[offset : offset + extent(shape, strides, dtype.itemsize)]
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
    window = mem[offset : offset + size]
    view = np.ndarray(shape, dtype, buffer=window, strides=strides)
    view[...] = values
    row = shape[-1] * dtype.itemsize
    tail = -(-row // burst) * burst - row
    if zero_tail and tail:
        tails = np.ndarray(
            shape[:-1] + (tail,), np.uint8, buffer=window, offset=row, strides=strides[:-1] + (1,)
        )
        tails[...] = 0


# ---------------------------------------------------------------- fp16 fast paths (Numba)
# The device's TileDMA moves fp16 tensors; the MAC kernels want float64.  These kernels
# read the checked window as uint16 bit patterns and decode them with the kernels' fp16
# codec (branch-free, so the loops vectorize; ``fastane.kernels.fp16``).


@njit(inline="always")
def _decode_plane(mem16, o, row, dst):
    """``dst[h, :] = decode(mem16[o + h*row : ... + W])`` for a float64 (H, W) ``dst``;
    returns the largest magnitude pattern (``bits & 0x7fff``) decoded."""
    H, W = dst.shape
    m = 0
    for h in range(H):
        src = mem16[o + h * row : o + h * row + W]
        d = dst[h]
        for k in range(W):
            v = np.int64(src[k])
            d[k] = f16_to_f64(v)
            m = max(m, v & 0x7FFF)
    return m


@njit(cache=True, boundscheck=False)
def gather_f16(mem16, plane, row, out, cmax):
    """``out[c, h, :] = decode(mem16[c*plane + h*row : ... + W])`` (``out`` float64 (C, H, W),
    C-contiguous; ``plane``/``row`` in elements).  ``cmax[c]``: the largest magnitude
    pattern (``bits & 0x7fff``) of channel ``c``: above 0x7c00 it holds a NaN, else its
    decoded value is the channel's max |x| (fp16 magnitudes order like their patterns)."""
    C, H, W = out.shape
    if H * W == 1:  # one value a channel (a decode step's input): no per-row views
        o1 = out.reshape(C)
        for c in range(C):
            v = np.int64(mem16[c * plane])
            o1[c] = f16_to_f64(v)
            cmax[c] = v & 0x7FFF
        return
    for c in range(C):
        cmax[c] = _decode_plane(mem16, c * plane, row, out[c])


@njit(cache=True, boundscheck=False)
def gather_bits(mem16, plane, row, out, cmax):
    """As :func:`gather_f16`, the fp16 bit patterns themselves: ``out`` uint16 (C, H, W),
    the operand the MAC kernels' float32 fast path decodes as it loads."""
    C, H, W = out.shape
    for c in range(C):
        m = 0
        for h in range(H):
            o = c * plane + h * row
            src = mem16[o : o + W]
            d = out[c, h]
            for k in range(W):
                v = src[k]
                d[k] = v
                m = max(m, np.int64(v) & 0x7FFF)
        cmax[c] = m


def window(mem, offset, shape, strides, itemsize, burst=64):
    """The bytes a checked transfer spans, ``mem[offset:offset + extent]``."""
    return mem[offset : offset + extent(shape, strides, itemsize, burst)]


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
    Returns whether any word of KMem changed: the copy compares as it goes (one pass), in
    blocks of 512 words until the first block that differs, then only copies."""
    changed = np.int64(0)
    for i in range(lanes.size):
        src = mem[sources[i] : sources[i] + sizes[i]]
        dst = kmem[lanes[i], : sizes[i]]
        k = 0
        while changed == 0 and k < src.size:
            s = src[k : k + 512]
            t = dst[k : k + 512]
            for j in range(s.size):
                v = s[j]
                changed |= v ^ t[j]
                t[j] = v
            k += s.size
        s = src[k:]
        t = dst[k:]
        for j in range(s.size):
            t[j] = s[j]
    return changed != 0


@njit(cache=True, boundscheck=False)
def equal_words(a, b):
    """Whether the 1-D integer arrays ``a`` and ``b`` (one size, one dtype) hold the same
    words: their bit patterns (a NaN payload, a signed zero), compared in blocks of 1024
    (a vectorized xor-or each), stopping at the first block that differs."""
    n = a.size
    for i in range(0, n, 1024):
        x = a[i : i + 1024]
        y = b[i : i + 1024]
        d = np.int64(0)
        for k in range(x.size):
            d |= x[k] ^ y[k]
        if d != 0:
            return False
    return True


@njit(cache=True, boundscheck=False)
def lanes_equal(kmem, lanes, sizes, kept):
    """Whether ``kmem[lanes[i], :sizes[i]]``, lane after lane, are the words of ``kept``
    (``kmem`` an integer [16, ...] view of the KMem bytes, ``kept`` a copy of them in the
    same words; ``sizes`` in words): the compare of :func:`equal_words`, in place."""
    o = 0
    for i in range(lanes.size):
        n = sizes[i]
        if not equal_words(kmem[lanes[i], :n], kept[o : o + n]):
            return False
        o += n
    return True


# ---------------------------------------------------------------- the MAC's im2col operand, from fp16
def unfold_f16(mem16, plane, row, H, W, CG, win, read_y, read_x, cols, tmax, workers):
    """TileDMASrc straight into the MAC's im2col operand: ``cols[g, (c*KH + ky)*KW + kx,
    oy*ow + ox]`` = the fp16 input's bit pattern (``mem16[ch*plane + y*row + x]``, ``ch =
    g*CG + c``, ``plane``/``row`` in elements) at ``y = oy*sy + ky*dy - pad_top``, ``x =
    ox*sx + kx*dx - pad_left``, or 0 outside the input (``cols`` uint16; ``win``: the
    windows, :func:`fastane.kernels.conv.window`); ``tmax[ch]`` = max |value| written (NaN
    if one is NaN); ``read_y``, ``read_x``: the pixels the windows read
    (:func:`fastane.kernels.conv.read_masks`).  The same patterns, in the same places, as
    ``fastane.kernels.conv``'s ``_im2col`` (the same core,
    :func:`fastane.kernels.conv.unfold_channel`): one task per input channel (its rows
    copied into a buffer of the thread, then unfolded), handed out through the work queue
    of :mod:`fastane.kernels.parallel`, whose threads call :func:`_unfold_tasks` through
    its address (:func:`fastane.kernels.parallel.call_native`)."""
    args = (mem16, plane, row, H, W, CG, win, read_y, read_x, cols, tmax)
    _unfold_par(native_entry(_unfold_tasks, *args, QUEUE), *args, workers)


@njit(parallel=True, cache=True, boundscheck=False)
def _unfold_par(entry, mem16, plane, row, H, W, CG, win, read_y, read_x, cols, tmax, workers):
    counter = new_queue()
    for _ in prange(workers):
        call_native(
            _unfold_tasks, entry, (mem16, plane, row, H, W, CG, win, read_y, read_x, cols, tmax, counter)
        )


@njit(cache=True, boundscheck=False)
def _unfold_tasks(mem16, plane, row, H, W, CG, win, read_y, read_x, cols, tmax, counter):
    """One thread of :func:`unfold_f16`: channels claimed from ``counter`` until none are
    left (the parallel loop only calls this: its body is compiled again with everything
    inlined into it: :mod:`fastane.kernels.parallel`)."""
    wide_vectors()
    line = np.empty((H, W), np.uint16)
    while True:
        t = claim(counter)
        if t >= tmax.size:
            break
        for y in range(H):  # the channel, into the thread's buffer (a loop: an array
            o = t * plane + y * row  # assignment compiles numba's shape-mismatch message)
            src = mem16[o : o + W]
            dst = line[y]
            for x in range(W):
                dst[x] = src[x]
        tmax[t] = f16_to_f64(unfold_channel(line, t % CG, win, cols[t // CG], read_y, read_x))
