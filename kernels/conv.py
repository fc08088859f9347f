"""2-D convolution on the MAC array's arithmetic (SPEC section 2).

Entry point (fixed interface)::

    acc, flag = conv2d_q16(x, w, sy, sx, dy, dx, pad_top, pad_left, oh, ow, groups, trunc)

``x``: float64[N, C, H, W] and ``w``: float64[CO, C // groups, KH, KW], C-contiguous,
exact fp16 values.  Output pixel ``(oy, ox)`` reads ``x`` at row
``oy*sy + ky*dy - pad_top`` and column ``ox*sx + kx*dx - pad_left``; pixels outside
``x`` are zero operands (so, like any zero, a padded pixel times an infinite weight is
a NaN product).  Each output sums, in this time order, over the input channel of its
group, then the kernel row, then the kernel column, on the saturating Q16.16
accumulator of :mod:`fastane.kernels.mac`.  ``acc``: float64[N, CO, oh, ow] in grid
units, ``flag``: int8[N, CO, oh, ow], exactly as ``matmul_q16`` returns them.

How: the input's fp16 bit patterns are unfolded (im2col) into ``[C/groups * KH * KW, oh * ow]`` per image
and group, with rows in the time order ``(c * KH + ky) * KW + kx``; the conv is then
the matmul ``w[g] @ cols`` whose ``k = 0..K-1`` order is exactly the conv's order, so
:func:`fastane.kernels.mac.matmul_q16_into` (its fast path, bounds and exact path)
applies unchanged.  Images are unfolded a chunk at a time to bound memory; a 1x1,
stride-1, unpadded conv needs no unfolding at all.
"""

import numpy as np
from numba import njit, prange

from . import mac, parallel
from .fp16 import f16_to_f64
from .mac import matmul_q16_into
from .mac_f32 import f16_patterns
from .parallel import claim, new_queue

# Unfold at most this many elements at a time (8 MiB of fp16 patterns), but at least one image.
CHUNK_ELEMENTS = 1 << 22


def window(KH, KW, sy, sx, dy, dx, pad_top, pad_left, oh, ow):
    """A convolution's windows as the one tuple the unfolding kernels take: kernel size,
    strides, dilations, top/left padding and output size (ints)."""
    return tuple(int(v) for v in (KH, KW, sy, sx, dy, dx, pad_top, pad_left, oh, ow))


def read_masks(H, W, win):
    """``(rows, cols)``: which input rows (uint16 (H,), 1 = read) and columns (uint16
    (W,), 0x7fff = read, else 0) the windows ``win`` (:func:`window`) read.  A pixel is read exactly
    when its row and its column are (the windows' rows and columns are independent), so
    :func:`unfold_channel` takes the max over that product set from the source."""
    KH, KW, sy, sx, dy, dx, pad_top, pad_left, oh, ow = win
    rows = np.zeros(H, np.uint16)
    cols = np.zeros(W, np.uint16)
    for mask, n_out, n_in, s, k, d, pad, on in (
        (rows, oh, H, sy, KH, dy, pad_top, 1),
        (cols, ow, W, sx, KW, dx, pad_left, 0x7FFF),
    ):
        at = (np.arange(n_out)[:, None] * s + np.arange(k)[None, :] * d - pad).ravel()
        mask[at[(at >= 0) & (at < n_in)]] = on
    return rows, cols


@njit(inline="always")
def _unfold_windows(src, c, KH, KW, sy, sx, dy, dx, pad_top, pad_left, oh, ow, rows):
    """:func:`unfold_channel`'s copy, window row by window row (any strides)."""
    H = src.shape[0]
    W = src.shape[1]
    for ky in range(KH):
        for kx in range(KW):
            r = (c * KH + ky) * KW + kx
            x0 = kx * dx - pad_left  # input column of ox = 0
            lo, hi = _inside(x0, W, sx, ow)
            dst = rows[r]
            for oy in range(oh):
                y = oy * sy + ky * dy - pad_top
                d = dst[oy * ow : (oy + 1) * ow]
                if y < 0 or y >= H:
                    for ox in range(ow):
                        d[ox] = 0
                    continue
                for ox in range(lo):
                    d[ox] = 0
                # views indexed from 0 (no negative-index wrap: the unit-stride copy vectorizes)
                seg = src[y, lo * sx + x0 : (hi - 1) * sx + x0 + 1 : sx] if hi > lo else src[y, :0]
                inner = d[lo:hi]
                for i in range(inner.size):
                    inner[i] = seg[i]
                for ox in range(hi, ow):
                    d[ox] = 0


@njit(inline="always")
def _unfold_shifted(src, c, KH, KW, dy, dx, pad_top, pad_left, oh, rows):
    """:func:`unfold_channel`'s copy for stride 1 with as many output as input columns
    (a "same" convolution): row ``(ky, kx)`` is the flat channel shifted by ``(ky*dy -
    pad_top)*W + kx*dx - pad_left``, one long copy (it vectorizes), zero where the shift
    leaves the channel; then the columns whose window starts outside the row (they hold
    a neighbouring row's pixels) are zeroed."""
    H = src.shape[0]
    W = src.shape[1]
    n = oh * W
    flat = src.reshape(H * W)
    for ky in range(KH):
        for kx in range(KW):
            r = (c * KH + ky) * KW + kx
            x0 = kx * dx - pad_left
            shift = (ky * dy - pad_top) * W + x0
            i0 = min(n, max(0, -shift))
            i1 = max(i0, min(n, H * W - shift))
            dst = rows[r]
            for i in range(i0):
                dst[i] = 0
            d = dst[i0:i1]  # views indexed from 0: no negative-index wrap, so it vectorizes
            f = flat[i0 + shift : i1 + shift]
            for i in range(d.size):
                d[i] = f[i]
            for i in range(i1, n):
                dst[i] = 0
            lo, hi = _inside(x0, W, 1, W)
            for oy in range(oh):
                for ox in range(lo):
                    rows[r, oy * W + ox] = 0
                for ox in range(hi, W):
                    rows[r, oy * W + ox] = 0


@njit(inline="always")
def _inside(x0, W, sx, ow):
    """``(lo, hi)``: the output columns ``lo <= ox < hi`` whose pixel ``ox*sx + x0`` lies
    inside a row of ``W`` input columns."""
    lo = 0 if x0 >= 0 else min(ow, (-x0 + sx - 1) // sx)  # first ox inside
    hi = 0 if W - 1 - x0 < 0 else min(ow, (W - 1 - x0) // sx + 1)  # past the last
    return lo, max(hi, lo)


@njit(inline="always")
def unfold_channel(src, c, win, rows, read_y, read_x):
    """The im2col core: input channel ``c`` of a group, ``src`` (fp16 bit patterns, uint16
    (H, W)), into the group's matrix ``rows`` (uint16 (CG*KH*KW, oh*ow)), for the windows
    ``win = (KH, KW, sy, sx, dy, dx, pad_top, pad_left, oh, ow)`` (:func:`window`):
    ``rows[(c*KH + ky)*KW + kx, oy*ow + ox] = src[y, x]`` at ``y = oy*sy + ky*dy - pad_top``,
    ``x = ox*sx + kx*dx - pad_left``, or 0 (+0.0) outside ``src``.  Returns the largest
    magnitude pattern written (``bits & 0x7fff``; above 0x7c00 a NaN was written), whose
    decoded value is the bound on ``max |b|`` the matmul wants (fp16 magnitudes order like
    their patterns): the max over the pixels read, ``read_y`` x ``read_x``
    (:func:`read_masks`).  Patterns, not values: a quarter of float64's bytes, and the
    operand the float32 fast path decodes as it loads (``fastane.kernels.mac_f32``)."""
    H = src.shape[0]
    W = src.shape[1]
    KH, KW, sy, sx, dy, dx, pad_top, pad_left, oh, ow = win
    if sy == 1 and sx == 1 and ow == W:
        _unfold_shifted(src, c, KH, KW, dy, dx, pad_top, pad_left, oh, rows)
    else:
        _unfold_windows(src, c, KH, KW, sy, sx, dy, dx, pad_top, pad_left, oh, ow, rows)
    m = 0
    for y in range(H):
        if read_y[y]:
            line = src[y]
            for x in range(W):
                m = max(m, line[x] & read_x[x])
    return np.int64(m)


@njit(parallel=True, cache=True)
def _im2col(x16, n0, n1, groups, win, read_y, read_x, cols, tmax, workers):
    """cols[n - n0, g, (c*KH + ky)*KW + kx, oy*ow + ox] = x16[n, g*CG + c, y, x], or 0
    outside ``x16`` (y = oy*sy + ky*dy - pad_top, x = ox*sx + kx*dx - pad_left; ``win``:
    :func:`window`); ``x16`` and ``cols``: fp16 bit patterns (uint16).

    ``tmax[((n - n0)*groups + g)*CG + c]``: max |value| written for that input channel
    (NaN if one is NaN), for the matmul's bound on ``max |b|``.  Tasks (one per input
    channel) are handed out through the work queue of :mod:`fastane.kernels.parallel`."""
    CG = x16.shape[1] // groups
    ntasks = (n1 - n0) * x16.shape[1]
    counter = new_queue()
    for _ in prange(workers):
        while True:
            t = claim(counter)
            if t >= ntasks:
                break
            nl = t // (groups * CG)  # image - n0
            g = (t // CG) % groups
            c = t % CG
            tmax[t] = f16_to_f64(
                unfold_channel(x16[n0 + nl, g * CG + c], c, win, cols[nl, g], read_y, read_x)
            )


def conv2d_q16(x, w, sy, sx, dy, dx, pad_top, pad_left, oh, ow, groups, trunc):
    """NCHW conv2d on the Q16.16 accumulator; returns ``(acc, flag)`` (see module doc)."""
    N, C, H, W = x.shape
    CO, CG, KH, KW = w.shape
    G = groups
    COG = CO // G
    KC = CG * KH * KW
    P = oh * ow
    acc = np.empty((N, CO, oh, ow))
    flag = np.empty((N, CO, oh, ow), np.int8)
    if acc.size == 0:
        return acc, flag
    plain = (
        KH == 1 and KW == 1 and sy == 1 and sx == 1 and pad_top == 0 and pad_left == 0 and oh == H and ow == W
    )
    chunk = max(1, min(N, CHUNK_ELEMENTS // max(1, G * KC * P)))
    wg = w.reshape(G, COG, KC)
    x16 = None  # the input's fp16 patterns, made for the first unfolded chunk
    win = window(KH, KW, sy, sx, dy, dx, pad_top, pad_left, oh, ow)
    read = None if plain else read_masks(H, W, win)
    for n0 in range(0, N, chunk):
        n1 = min(N, n0 + chunk)
        nb = (n1 - n0) * G
        if plain:
            cols = x[n0:n1].reshape(nb, KC, P)  # a view: the input already is the matrix
            bmax = None
        else:
            if x16 is None:
                x16 = np.empty(x.shape, np.uint16)
                f16_patterns(np.ascontiguousarray(x), x16)  # exact: fp16 values
            cols = np.empty((n1 - n0, G, KC, P), np.uint16)
            tmax = np.empty(nb * CG)
            with parallel.threads_for(nb * COG * P * KC, mac.SERIAL_MACS):  # as the matmul that follows
                _im2col(x16, n0, n1, G, win, *read, cols, tmax, parallel.workers())
            cols = cols.reshape(nb, KC, P).view(np.float16)  # read as patterns by the fast path
            bmax = tmax.reshape(nb, CG).max(axis=1)  # NaN propagates
        ia = np.tile(np.arange(G, dtype=np.int64), n1 - n0)
        ib = np.arange(nb, dtype=np.int64)
        matmul_q16_into(
            wg, cols, ia, ib, trunc, acc[n0:n1].reshape(nb, COG, P), flag[n0:n1].reshape(nb, COG, P), bmax
        )
    return acc, flag
