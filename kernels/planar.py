"""The planar engine's arithmetic: elementwise ops and row reductions on fp16 values.

Values travel as float64 holding exact fp16 values (what TileDMASrc and L2 hand over);
results are written as fp16 bit patterns (uint16; NaN is always the quiet NaN 0x7e00).

**Arithmetic (fastane's decision, docs/device.md "Planar engine")** -- every stage rounds
once, to nearest even, to fp16:

1. operand scale: ``a' = round16(s0 * a)`` for the RBase0 operand (``s0`` = high half of
   Planar word 2; skipped when ``s0 == 1``, where it is the identity);
2. the operation: ``y = round16(op(a', b))`` -- the exact result of add, subtract,
   multiply, max, min, abs (the sum or product of two fp16 values is exact in float64,
   so rounding the float64 result is the correctly rounded fp16 operation);
   a reduction's exact sum / max over the row, rounded once; the reciprocal flag then
   rounds ``1 / y`` once more;
3. output affine: ``out = round16(s * y + c)`` in one rounding (``s``, ``c`` = high and
   low halves of Planar word 1; ``s * y`` is exact and the sum is rounded by the exact
   four-term rounding of :mod:`fastane.kernels.lut`); skipped when ``(s, c) = (1, 0)``,
   and an offset of 0 adds nothing (``-0`` stays ``-0``).

IEEE rules otherwise: NaN in, NaN out; ``inf - inf``, ``0 * inf`` -> NaN; overflow past
65504 rounds to inf; subnormals are kept (no flush to zero).  max/min: NaN if either
operand is NaN; ``max(-0, +0) = +0``, ``min(-0, +0) = -0``.

Kernels assume valid input (shapes, codes); the front end is ``fastane.device.planar``.
"""

import numpy as np
from numba import njit, prange

from .fp16 import f16_to_f64, f64_to_f16, round_f16
from .lut import round_sum_f16

#: elementwise operation codes (the kernel's own; ``fastane.device.planar`` maps Word 0)
OP_PASS = 0  # scale/offset only
OP_ADD = 1
OP_SUB = 2  # a - b
OP_MUL = 3
OP_MAX = 4
OP_MIN = 5
OP_ABS = 6
#: reduction codes
RED_SUM = 0
RED_MAX = 1

_SCALE = 2.0**24  # fp16 values are integer multiples of 2**-24
_INV_SCALE = 2.0**-24


@njit(cache=True, inline="always")
def _signbit(x):
    return np.float64(x).view(np.int64) < 0


@njit(cache=True, inline="always")
def _scaled_operand(x, s0):
    """Stage 1: the RBase0 operand ``x`` scaled by ``s0``, rounded once (identity for 1)."""
    return round_f16(x * s0) if s0 != 1.0 else x


def _affine_py(y, s, c):
    """``round16(s * y + c)`` for an exact fp16 value ``y`` and fp16 ``s``, ``c``."""
    if s == 1.0 and c == 0.0:
        return y
    t = s * y  # exact: two 11-bit significands
    if c == 0.0:
        return round_f16(t)
    r = t + c
    if r - r != 0.0:  # inf or NaN: IEEE arithmetic decides
        return round_f16(r)
    bb = r - t  # two-sum: is the float64 sum exact?
    if (t - (r - bb)) + (c - bb) == 0.0:
        return round_f16(r)
    return f16_to_f64(round_sum_f16(t, c, 0.0, 0.0))


def _apply_op_py(op, a, b):
    """``round16(op(a, b))`` for exact fp16 values ``a``, ``b``."""
    if op == OP_ADD:
        return round_f16(a + b)
    if op == OP_SUB:
        return round_f16(a - b)
    if op == OP_MUL:
        return round_f16(a * b)
    if op == OP_MAX or op == OP_MIN:
        if a != a or b != b:
            return np.nan
        if a == b:  # equal values; only the zeros differ (by sign)
            neg = _signbit(a) and _signbit(b) if op == OP_MAX else _signbit(a) or _signbit(b)
            if a == 0.0:
                return -0.0 if neg else 0.0
            return a
        if op == OP_MAX:
            return a if a > b else b
        return a if a < b else b
    if op == OP_ABS:
        return abs(a)
    return a


# Each compiled twice from its one definition (as fastane.kernels.ne's helpers): a plain
# call where the operation is a constant (compiled once per operation and scales, inlined
# by LLVM: the cold compile of the window kernels takes ~1 s, not ~5 s of Numba's IR-level
# copies), and an IR-inlined copy for the loops over an operation known only at run time.
affine, _affine_inline = njit(cache=True)(_affine_py), njit(inline="always")(_affine_py)
apply_op, _apply_op_inline = njit(cache=True)(_apply_op_py), njit(inline="always")(_apply_op_py)


def _eltwise(a, b, op, s0, s, c, out):
    """Elementwise over rows: ``a`` (R, Wa), ``b`` (R, Wb) with ``Wa``/``Wb`` equal to
    ``out``'s W or 1 (broadcast along the row); ``b`` is ignored by unary ops.
    ``out``: uint16 (R, W) fp16 patterns.  Returns the number of NaN outputs."""
    rows, width = out.shape
    wa = a.shape[1]
    wb = b.shape[1]
    nans = 0
    for r in prange(rows):
        n = 0
        for w in range(width):
            x = _scaled_operand(a[r, w if wa != 1 else 0], s0)
            y = b[r, w if wb != 1 else 0] if wb > 0 else 0.0
            v = _affine_inline(_apply_op_inline(op, x, y), s, c)
            out[r, w] = f64_to_f16(v)
            if v != v:
                n += 1
        nans += n
    return nans


@njit(cache=True, inline="always")
def _sum_row(a, r, s0):
    """Exact sum of row ``r`` (each element first scaled by ``s0``), rounded once."""
    acc = np.int64(0)
    pinf = False
    ninf = False
    for w in range(a.shape[1]):
        x = _scaled_operand(a[r, w], s0)
        if x != x:
            return np.nan
        if x - x != 0.0:  # +-inf
            if x > 0.0:
                pinf = True
            else:
                ninf = True
            continue
        acc += np.int64(x * _SCALE)  # exact: an integer below 2**40
    return _sum_value(acc, False, pinf, ninf)


@njit(cache=True, inline="always")
def _sum_value(acc, nan, pinf, ninf):
    """A row's sum from the exact sum ``acc`` of its finite elements (in units of
    ``2**-24``) and whether it held a NaN, +inf, -inf: NaN for a NaN or both
    infinities, else the infinity, else ``acc`` rounded once to fp16."""
    if nan or (pinf and ninf):
        return np.nan
    if pinf:
        return np.inf
    if ninf:
        return -np.inf
    return _round_units(acc)


@njit(inline="always")
def _round_units(acc):
    """The fp16 value (a float64) nearest ``acc * 2**-24`` (``acc``: an int64 of units of
    ``2**-24``, ``|acc| < 2**62``), half to even, an infinity beyond fp16's range: in
    integers, ``|acc|`` rounded half to even to its 11 leading significant bits (an fp16
    significand; below ``2**11`` units every integer is an fp16 value, subnormals
    included), which float64 then holds exactly, as it holds the scaling (0 is +0).  The
    readout's int32 twin, branch-free for 16 lanes, is :func:`fastane.kernels.mac_f32.
    sum_value32` (units of ``2**-16``, no overflow)."""
    m = abs(acc)
    sh = 0
    while (m >> sh) >= 2048:
        sh += 1
    q = m >> sh
    if sh > 0:
        rem = m - (q << sh)
        half = np.int64(1) << (sh - 1)
        if rem > half or (rem == half and (q & 1) == 1):
            q += 1
    v = np.float64(q << sh) * _INV_SCALE
    if v > 65504.0:
        v = np.inf
    return -v if acc < 0 else v


@njit(cache=True, inline="always")
def _max_row(a, r, s0):
    m = -np.inf
    for w in range(a.shape[1]):
        x = _scaled_operand(a[r, w], s0)
        if x != x:
            return np.nan
        if x > m or (x == m and x == 0.0 and not _signbit(x)):
            m = x
    return m


@njit(cache=True, inline="always")
def _finish_row(y, recip, s, c):
    """A reduced row ``y`` through the reciprocal (when ``recip``) and the output affine."""
    return affine(_reciprocal(y, recip), s, c)


@njit(inline="always")
def _reciprocal(y, recip):
    """``1/y`` rounded to fp16 when ``recip`` (an infinity for a zero), else ``y``."""
    if recip:
        if y == 0.0:
            y = -np.inf if _signbit(y) else np.inf
        else:  # 1/h of an fp16 h is never near an fp16 tie
            y = round_f16(1.0 / y)
    return y


def _reduce(a, kind, s0, recip, s, c, out):
    """Row reductions: ``out[r]`` = sum or max of ``a[r, :]`` (then ``1/.`` when
    ``recip``, then the output affine), as fp16 patterns.  Returns the NaN count."""
    rows = a.shape[0]
    nans = 0
    for r in prange(rows):
        if kind == RED_MAX:
            y = _max_row(a, r, s0)
        else:
            y = _sum_row(a, r, s0)
        v = _finish_row(y, recip, s, c)
        out[r] = f64_to_f16(v)
        if v != v:
            nans += 1
    return nans


eltwise_serial = njit(cache=True)(_eltwise)
eltwise_parallel = njit(cache=True, parallel=True)(_eltwise)
reduce_serial = njit(cache=True)(_reduce)
reduce_parallel = njit(cache=True, parallel=True)(_reduce)


_CHUNK = 2048  # elements decoded at a time by eltwise_window (two float64 rows in L1)


@njit(inline="always")
def _decode_piece(src, o, step, x):
    """``x[w] = decode(src[o + w])`` (``step`` 1), or ``decode(src[o])`` for every ``w``
    (``step`` 0: a row broadcast)."""
    if step == 0:
        v = f16_to_f64(src[o])
        for w in range(x.size):
            x[w] = v
    else:
        row = src[o : o + x.size]
        for w in range(x.size):
            x[w] = f16_to_f64(row[w])


@njit(cache=True)
def _piece_unit(xa, xb, op, s0, s, c, d):
    """:func:`_piece` for ``s0 = s = 1``, ``c = 0`` (where the operand scale and the output
    affine are the identity): :func:`_unit`.  Its callers (:func:`_window_unit_for`) pass
    the operation as a constant, so Numba compiles it, :func:`_unit` and :func:`apply_op`
    in it once for each operation, as a literal: a branch-free loop each; plain calls,
    which LLVM inlines, not Numba's IR-level copies (its inliner cost seconds of a cold
    compile per copy)."""
    return _unit(xa, xb, op, d)


@njit(cache=True)
def _unit(xa, xb, op, d):
    """:func:`_piece` with ``s0 = s = 1``, ``c = 0``: ``_scaled_operand(x, 1.0)`` is ``x``
    and ``affine(y, 1.0, 0.0)`` is ``y``, so the value is ``apply_op``'s."""
    n = 0
    for w in range(d.size):
        v = apply_op(op, xa[w], xb[w])
        d[w] = f64_to_f16(v)
        if v != v:
            n += 1
    return n


@njit(cache=True)
def _piece_scaled(xa, xb, op, s0, s, c, d):
    """:func:`_piece` for an offset ``c = 0`` (every corpus planar task: ``sub`` is an add
    with ``s0 = -1``, ``ave`` an add with ``s = 0.5``, softmax's subtraction has
    ``s = log2(e)``), those two operations as constants (each a literal in its call, as
    :func:`_window_unit_for` passes them)."""
    if op == OP_ADD:
        return _scaled(xa, xb, OP_ADD, s0, s, d)
    if op == OP_SUB:
        return _scaled(xa, xb, OP_SUB, s0, s, d)
    return _scaled(xa, xb, op, s0, s, d)


@njit(cache=True)
def _scaled(xa, xb, op, s0, s, d):
    """:func:`_piece` with ``c = 0``, without its branches on the scales: for an fp16
    value ``x`` (or a NaN) ``round_f16(1.0 * x)`` is ``x``, so ``round_f16(s0 * x)`` is
    :func:`_scaled_operand` for every ``s0`` (1 included) and ``round_f16(s * y)`` is
    :func:`affine` ``(y, s, 0)`` for every ``s`` (the NaNs are NaNs: only whether a value
    is NaN reaches the output, as 0x7e00)."""
    n = 0
    for w in range(d.size):
        v = round_f16(s * apply_op(op, round_f16(s0 * xa[w]), xb[w]))
        d[w] = f64_to_f16(v)
        if v != v:
            n += 1
    return n


@njit(cache=True)
def _piece(xa, xb, op, s0, s, c, d):
    """``d[w]`` = the fp16 pattern of :func:`_eltwise`'s value for ``xa[w]``, ``xb[w]``
    (``w < d.size``); returns the NaN count."""
    n = 0
    for w in range(d.size):
        v = _affine_inline(_apply_op_inline(op, _scaled_operand(xa[w], s0), xb[w]), s, c)
        d[w] = f64_to_f16(v)
        if v != v:
            n += 1
    return n


def eltwise_window(a, ap, ar, aw, b, bp, br, bw, C, H, W, op, s0, s, c, dst, dp, dr, wpad):
    """:func:`_eltwise` on fp16 patterns read and written in place (no float64 tensors):
    element ``(ch, h, w)`` of operand ``a`` is ``a[ch*ap + h*ar + w*aw]`` (flat uint16;
    ``aw`` is 1, or 0 for an operand broadcast along the row), of ``b`` likewise (``b``
    empty for a unary op), and the result goes to ``dst[ch*dp + h*dr + w]``; ``dst[... +
    w]`` for ``W <= w < wpad`` is zeroed.  Each piece of a row is decoded by the fp16
    codec into float64 (what TileDMASrc hands :func:`_eltwise`), then computed as there,
    so the bits and the NaN count (returned) are :func:`_eltwise`'s.  Serial (a
    memory-bound pass: a parallel region costs more than it saves on a shared machine);
    destination rows must not overlap.

    One kernel per scale case (:func:`_piece_unit`, :func:`_piece_scaled`, :func:`_piece`;
    with unit scales one per operation, :func:`_window_unit_for`), compiled on its first
    use (a cold compile of the three took ~4 s)."""
    if s0 == 1.0 and s == 1.0 and c == 0.0:
        kernel = _WINDOW_UNIT[op]
    elif c == 0.0:
        kernel = _window_scaled
    else:
        kernel = _window_affine
    return kernel(a, ap, ar, aw, b, bp, br, bw, C, H, W, op, s0, s, c, dst, dp, dr, wpad)


@njit(inline="always")
def _window(piece, a, ap, ar, aw, b, bp, br, bw, C, H, W, op, s0, s, c, dst, dp, dr, wpad):
    """:func:`eltwise_window`'s loop, each decoded piece computed by ``piece``."""
    unary = b.size == 0
    xa = np.empty(_CHUNK)
    xb = np.zeros(_CHUNK)
    nans = 0
    for t in range(C * H):
        ch = t // H
        h = t - ch * H
        oa = ch * ap + h * ar
        ob = ch * bp + h * br
        od = ch * dp + h * dr
        for st in range(0, W, _CHUNK):
            m = min(_CHUNK, W - st)
            _decode_piece(a, oa + st * aw, aw, xa[:m])
            if not unary:
                _decode_piece(b, ob + st * bw, bw, xb[:m])
            nans += piece(xa, xb, op, s0, s, c, dst[od + st : od + st + m])
        for w in range(W, wpad):
            dst[od + w] = 0
    return nans


def _window_unit_for(op):
    """:func:`eltwise_window`'s kernel for unit scales and the one operation ``op``, a
    constant (:func:`_piece_unit`): the first use of an operation compiles its loop only
    (one kernel over a run-time operation compiled all seven: ResNet's one pass-through
    copy cost ~1.4 s of a cold compile for them)."""

    @njit(cache=True, boundscheck=False)
    def window_unit(a, ap, ar, aw, b, bp, br, bw, C, H, W, op_, s0, s, c, dst, dp, dr, wpad):
        return _window(_piece_unit, a, ap, ar, aw, b, bp, br, bw, C, H, W, op, s0, s, c, dst, dp, dr, wpad)

    return window_unit


#: eltwise_window's kernel of each operation code with unit scales (each compiled on first use)
_WINDOW_UNIT = {op: _window_unit_for(op) for op in (OP_PASS, OP_ADD, OP_SUB, OP_MUL, OP_MAX, OP_MIN, OP_ABS)}


@njit(cache=True, boundscheck=False)
def _window_scaled(a, ap, ar, aw, b, bp, br, bw, C, H, W, op, s0, s, c, dst, dp, dr, wpad):
    return _window(_piece_scaled, a, ap, ar, aw, b, bp, br, bw, C, H, W, op, s0, s, c, dst, dp, dr, wpad)


@njit(cache=True, boundscheck=False)
def _window_affine(a, ap, ar, aw, b, bp, br, bw, C, H, W, op, s0, s, c, dst, dp, dr, wpad):
    return _window(_piece, a, ap, ar, aw, b, bp, br, bw, C, H, W, op, s0, s, c, dst, dp, dr, wpad)


@njit(inline="always")
def _sum_bits(row):
    """:func:`_sum_row` of a row of fp16 patterns (uint16) with ``s0 = 1``, on the patterns:
    a finite element's value in units of ``2**-24`` is its significand (the implicit bit
    set for a normal exponent ``e``) shifted left by ``max(e - 1, 0)``, the same integer as
    ``x * 2**24``; the int64 sum is the same in any order."""
    acc = np.int64(0)
    special = np.int64(0)  # bit 0: a NaN, bit 1: +inf, bit 2: -inf
    for w in range(row.size):
        h = np.int64(row[w])
        a = h & 0x7FFF
        e = a >> 10
        v = ((a & 0x3FF) | (np.int64(e != 0) << 10)) << max(e - 1, 0)
        v = v if e != 31 else 0
        acc += -v if h & 0x8000 else v
        special |= np.int64(a > 0x7C00) | (np.int64(h == 0x7C00) << 1) | (np.int64(h == 0xFC00) << 2)
    return _sum_value(acc, special & 1 != 0, special & 2 != 0, special & 4 != 0)


@njit(inline="always")
def _max_bits(row):
    """:func:`_max_row` of a row of fp16 patterns with ``s0 = 1``, on the patterns: the
    key ``a`` (+) or ``-a - 1`` (-) of the magnitude ``a`` orders the non-NaN patterns as
    their values, with ``-0`` below ``+0`` as :func:`_max_row` keeps them; the start is
    -inf's key, so an empty row is -inf there too."""
    kmax = np.int64(-0x7C01)
    nan = False
    for w in range(row.size):
        h = np.int64(row[w])
        a = h & 0x7FFF
        key = -a - 1 if h & 0x8000 else a
        kmax = max(kmax, key)
        nan |= a > 0x7C00
    if nan:
        return np.nan
    return f16_to_f64(kmax if kmax >= 0 else (-kmax - 1) | 0x8000)


def reduce_window(src, stride, rows, W, kind, s0, recip, s, c, out):
    """:func:`_reduce` on fp16 patterns read in place (no float64 tensor): row ``r`` is
    ``src[r*stride : r*stride + W]`` (flat uint16), ``out[r]`` its fp16 pattern; returns
    the NaN count.  With ``s0 = 1`` and ``c = 0`` (every corpus reduction) the sum and the
    max work on the patterns (:func:`_sum_bits`, :func:`_max_bits`), then the reciprocal
    and the scale (:func:`_finish_row` for ``c = 0``, where :func:`affine` is
    ``round_f16(s * y)``: no offset's exact rounding to compile); otherwise each row is decoded by the fp16 codec, reduced by
    :func:`_sum_row` / :func:`_max_row` themselves and finished by :func:`_finish_row`, as
    in :func:`_reduce`.  Serial (a
    memory-bound pass, as :func:`eltwise_window`).  One kernel per case, compiled on its
    first use (ResNet's average pool compiled all three: ~0.8 s of a cold compile)."""
    if s0 != 1.0 or c != 0.0:
        kernel = _reduce_decoded
    else:
        kernel = _reduce_max_bits if kind == RED_MAX else _reduce_sum_bits
    return kernel(src, stride, rows, W, kind, s0, recip, s, c, out)


@njit(inline="always")
def _reduce_rows(reduce_row, src, stride, rows, W, recip, s, c, out):
    """:func:`reduce_window`'s loop, each row reduced by ``reduce_row(row)``."""
    nans = 0
    for r in range(rows):
        y = _reciprocal(reduce_row(src[r * stride : r * stride + W]), recip)
        v = y if s == 1.0 else round_f16(s * y)  # affine(y, s, 0)
        out[r] = f64_to_f16(v)
        if v != v:
            nans += 1
    return nans


@njit(cache=True, boundscheck=False)
def _reduce_sum_bits(src, stride, rows, W, kind, s0, recip, s, c, out):
    return _reduce_rows(_sum_bits, src, stride, rows, W, recip, s, c, out)


@njit(cache=True, boundscheck=False)
def _reduce_max_bits(src, stride, rows, W, kind, s0, recip, s, c, out):
    return _reduce_rows(_max_bits, src, stride, rows, W, recip, s, c, out)


@njit(cache=True, boundscheck=False)
def _reduce_decoded(src, stride, rows, W, kind, s0, recip, s, c, out):
    x = np.empty((1, W))
    nans = 0
    for r in range(rows):
        row = src[r * stride : r * stride + W]
        for w in range(W):
            x[0, w] = f16_to_f64(row[w])
        y = _max_row(x, 0, s0) if kind == RED_MAX else _sum_row(x, 0, s0)
        v = _finish_row(y, recip, s, c)
        out[r] = f64_to_f16(v)
        if v != v:
            nans += 1
    return nans
