"""The MAC array: each core reduces its rows against its kernel (SPEC 2).

The geometry comes from the ``Common`` registers: ``Cin``, ``Cout``, ``InDim``/``OutDim``,
``ConvCfg.Kw/Kh`` (kernel), ``Sx/Sy`` (stride), ``Px/Py`` (left/top zero padding; the
right/bottom padding is whatever ``Wout``/``Hout`` imply), ``GroupConvCfg.NumGroups``.
**Decisions** where the bit map is silent: ``ConvCfg.Ox/Oy`` are the dilation (every
corpus TD has 1; 0 reads as 1); the MAC mode is

* ``NE.MACCfg.KernelMode = 0`` and ``OpMode = 0``: convolution with the weights in KMem
  (the seed, conv/gemm .hwx);
* ``KernelMode = 1`` (``OpMode`` 0 or 4): no weights, the source passes through to the NE
  unchanged (elementwise programs of the corpus: relu, the LUT activations, concat); this
  needs ``Cin = Cout``, a 1x1 kernel and stride 1; KMem then holds NE coefficients.

The arithmetic is the MAC kernels' (``fastane.kernels.conv.conv2d_q16`` and
``fastane.kernels.mac.readout``); this block checks geometry, counts MACs and reads
back the saturation flags.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from fastane.kernels import conv as _kconv
from fastane.kernels import dma as _kdma
from fastane.kernels import mac as _kmac
from fastane.kernels import mac_skinny as _kskinny
from fastane.kernels import parallel as _kpar

from ..m1 import DTYPES
from . import int8, palette
from .dims import task_dims
from .faults import DecodeFault, UnsupportedTask
from .host_memory import task_host_bytes

CONV, PASSTHROUGH = "conv", "passthrough"


@dataclass(frozen=True)
class Geometry:
    mode: str
    cin: int
    hin: int
    win: int
    cout: int
    hout: int
    wout: int
    kh: int
    kw: int
    sy: int
    sx: int
    dy: int
    dx: int
    pad_top: int
    pad_left: int
    groups: int
    in_fmt: int
    out_fmt: int
    kernel_fmt: object  # a KernelFmt code, or a fastane.device.palette.Palettized kernel

    @property
    def cin_g(self) -> int:
        return self.cin // self.groups

    @functools.cached_property
    def macs(self) -> int:
        """Multiply-accumulates the task performs (0 when nothing is multiplied)."""
        if self.mode != CONV:
            return 0
        return self.cout * self.hout * self.wout * self.cin_g * self.kh * self.kw


def geometry(regs: dict, what: str) -> Geometry:
    """Decode and check the task geometry from the register file."""
    r = regs
    g = Geometry(
        mode=CONV if r["NE.MACCfg.KernelMode"] == 0 else PASSTHROUGH,
        cin=r["Common.Cin.Cin"],
        hin=r["Common.InDim.Hin"],
        win=r["Common.InDim.Win"],
        cout=r["Common.Cout.Cout"],
        hout=r["Common.OutDim.Hout"],
        wout=r["Common.OutDim.Wout"],
        kh=r["Common.ConvCfg.Kh"],
        kw=r["Common.ConvCfg.Kw"],
        sy=r["Common.ConvCfg.Sy"],
        sx=r["Common.ConvCfg.Sx"],
        dy=r["Common.ConvCfg.Oy"] or 1,
        dx=r["Common.ConvCfg.Ox"] or 1,
        pad_top=r["Common.ConvCfg.Py"],
        pad_left=r["Common.ConvCfg.Px"],
        groups=r["Common.GroupConvCfg.NumGroups"],
        in_fmt=r["Common.ChCfg.InFmt"],
        out_fmt=r["Common.ChCfg.OutFmt"],
        kernel_fmt=palette.kernel_format(r, what),
    )
    task_dims(r, what, kernel=True)  # every dimension at least 1
    op = r["NE.MACCfg.OpMode"]
    if g.mode == CONV and op != 0:
        raise UnsupportedTask(f"{what}: NE.MACCfg.OpMode = {op} with a kernel is not emulated", op_mode=op)
    if g.mode == PASSTHROUGH and op not in (0, 4):
        raise UnsupportedTask(f"{what}: NE.MACCfg.OpMode = {op} is not emulated", op_mode=op)
    int8.check_task(r, what)  # the FP16 path, or the INT8 path (fastane.device.int8)
    if g.cin % g.groups or g.cout % g.groups:
        raise DecodeFault(f"{what}: Cin {g.cin} and Cout {g.cout} must be multiples of NumGroups {g.groups}")
    if regs["L2.L2Cfg.PaddingMode"] != 0:
        raise UnsupportedTask(
            f"{what}: L2.L2Cfg.PaddingMode = {regs['L2.L2Cfg.PaddingMode']} "
            f"(only 0, zero padding, is emulated)"
        )
    if g.mode == PASSTHROUGH:
        if (g.cin, g.hin, g.win) != (g.cout, g.hout, g.wout) or (g.kh, g.kw, g.sy, g.sx) != (1, 1, 1, 1):
            raise UnsupportedTask(
                f"{what}: a kernel-less task must map Cin x Hin x Win = "
                f"{g.cin}x{g.hin}x{g.win} onto the same output shape with a 1x1 "
                f"kernel (got {g.cout}x{g.hout}x{g.wout}, kernel {g.kh}x{g.kw})"
            )
        return g
    # every output window must start inside the padded input, and the first one cover it
    for name, n_out, n_in, s, k, d, pad in (
        ("rows", g.hout, g.hin, g.sy, g.kh, g.dy, g.pad_top),
        ("columns", g.wout, g.win, g.sx, g.kw, g.dx, g.pad_left),
    ):
        span = (k - 1) * d + 1
        if pad >= span or (n_out - 1) * s - pad >= n_in:
            raise DecodeFault(
                f"{what}: {n_out} output {name} (stride {s}, kernel {k}, dilation "
                f"{d}, padding {pad}) read windows outside the {n_in} input {name}"
            )
    return g


def host_bytes(g: Geometry) -> int:
    """Host bytes a task of geometry ``g`` makes the MAC and NE blocks allocate at most
    (estimated from the registers): the float64 source, the im2col columns of a
    non-plain convolution as fp16 patterns and (if a row leaves the float32 fast path) as
    float64, the float64 weights, a float32 copy of a plain convolution's source, and per
    output the int32 sum of the float32 fast path, the accumulator (float64), its flag,
    the readout (float64), the NE's fp16 result and its float64 copy."""
    n_in, n_out = g.cin * g.hin * g.win, g.cout * g.hout * g.wout
    if g.mode != CONV:
        return task_host_bytes(f64=n_in + n_out, results=n_out)
    cols = 0 if plain(g) else g.cin * g.kh * g.kw * g.hout * g.wout
    weights = g.cout * g.cin_g * g.kh * g.kw
    if int8.is_int(g.in_fmt):  # the INT8 path: the operands scaled once more (fastane.kernels.mac_int8)
        n_in, weights = 2 * n_in, 2 * weights
    # the float32 fast path's operand: a float32 copy of the source (a plain 1x1) or the
    # im2col columns' fp16 patterns (the transposed product's right operand, the weights,
    # is kept in fp16); its int32 sums, one an output (4 bytes, as a float32)
    return task_host_bytes(
        f64=n_in + cols + weights + 2 * n_out, results=n_out, flags=n_out, f32=n_in + n_out, f16=cols
    )


@functools.lru_cache(maxsize=256)
def _unfolding(g: Geometry):
    """``(win, read_y, read_x)``: the windows of a convolution
    (:func:`fastane.kernels.conv.window`) and the input rows and columns they read
    (:func:`fastane.kernels.conv.read_masks`, read-only), per geometry."""
    win = _kconv.window(g.kh, g.kw, g.sy, g.sx, g.dy, g.dx, g.pad_top, g.pad_left, g.hout, g.wout)
    masks = _kconv.read_masks(g.hin, g.win, win)
    for m in masks:
        m.flags.writeable = False
    return (win, *masks)


def plain(g: Geometry) -> bool:
    """A 1x1, stride-1, unpadded convolution: the input already is the matmul operand."""
    return (
        g.kh == 1
        and g.kw == 1
        and g.sy == 1
        and g.sx == 1
        and g.pad_top == 0
        and g.pad_left == 0
        and g.hout == g.hin
        and g.wout == g.win
    )


_ARANGE: dict = {}


def _arange(n: int) -> np.ndarray:
    a = _ARANGE.get(n)
    if a is None:
        a = _ARANGE[n] = np.arange(n, dtype=np.int64)
        a.flags.writeable = False
    return a


#: the fp16 magnitude pattern of infinity: magnitude patterns above it are NaN
_INF_BITS = 0x7C00
#: |fp16| of each magnitude pattern 0..0x7fff (NaN above 0x7c00)
_MAGNITUDES = np.arange(0x8000, dtype=np.uint16).view(np.float16).astype(np.float64)


def _max_abs(cmax: np.ndarray, groups: int) -> np.ndarray:
    """Per group, max |x| (NaN when the group holds a NaN) from the per-channel largest
    magnitude patterns ``cmax`` (fp16 magnitudes order like their bit patterns)."""
    if groups == 1:
        return _MAGNITUDES[[int(cmax.max())]]
    return _MAGNITUDES[cmax.reshape(groups, -1).max(axis=1)]


def accumulate(g: Geometry, x: np.ndarray, w: np.ndarray, cmax=None, trunc: bool = False, out=None):
    """``(acc, flag)`` of the convolution, ``[1, Cout, Hout, Wout]`` each (the MAC kernels'
    accumulators and clamp flags, :func:`fastane.kernels.conv.conv2d_q16`).

    ``cmax``: per input channel, the largest magnitude pattern of ``x`` (what
    :func:`fastane.device.tile_dma.read_max` returns).  For a plain 1x1 convolution the
    accumulation is the matmul ``w[g] @ x[g]`` per group, exactly what ``conv2d_q16``
    runs; it is then called directly (``matmul_q16_into``) with ``max |x|`` per group taken
    from ``cmax`` instead of another pass over ``x`` -- the same bound, so the same
    fast/exact split and the same bits.  ``out``: C-contiguous ``(acc, flag)`` arrays to
    write them into (used on that path only)."""
    if cmax is not None and plain(g) and x.flags.c_contiguous and w.flags.c_contiguous:
        G, P = g.groups, g.hout * g.wout
        cog = g.cout // G
        if out is None:
            acc = np.empty((1, g.cout, g.hout, g.wout))
            flag = np.empty((1, g.cout, g.hout, g.wout), np.int8)
        else:
            acc, flag = out
        idx = _arange(G)
        _kmac.matmul_q16_into(
            w.reshape(G, cog, g.cin_g),
            x.reshape(G, g.cin_g, P),
            idx,
            idx,
            trunc,
            acc.reshape(G, cog, P),
            flag.reshape(G, cog, P),
            _max_abs(cmax, G),
        )
        return acc, flag
    return _kconv.conv2d_q16(
        x, w, g.sy, g.sx, g.dy, g.dx, g.pad_top, g.pad_left, g.hout, g.wout, g.groups, trunc
    )


#: outputs with at most this many pixels per output channel (``Hout x Wout``; a matmul's
#: rows), and more channels per group than pixels, take the transposed product
NARROW_PIXELS = 64
#: ... and run on one thread (``threads_for(0, NARROW_SERIAL)``: always serial)
NARROW_SERIAL = 1
#: ungrouped outputs with at most this many pixels (rows), fewer than their channels, are
#: computed from the fp16 weights in KMem, along ``Cin x Kh x Kw`` (the input, or its
#: im2col columns; :mod:`fastane.kernels.mac_skinny`), when their rows pass its bounds;
#: no transposed copy of the weights is made or kept (the kept ``w^T`` serves grouped
#: narrow ones and rows the bounds leave to the general kernels).  One thread, against
#: the general kernels: 50 vs 14 GMAC/s at 49 x 4608 x 112 (ResNet-50's 7 x 7 layers),
#: 47 vs 30 at 196 x 2304 x 224 (14 x 14), 42 vs 45 at 784 x 1152 x 448 (28 x 28); also
#: with more pixels than channels when they are few (:data:`NARROW_PIXELS`: 0.12 vs 0.17 ms
#: at 49 x 512 x 32) or when an earlier task of the layer made the kernel's rows of the
#: columns (ResNet-50's 32-channel tails: 0.30 vs 0.41 ms at 196 x 2304 x 32; without
#: the rows made, the general kernels are faster there, 0.51 vs 0.64 ms)
SKINNY_ROWS = 256
#: ... on Numba's threads from this many multiply-adds: a decode step's task (1 x 4096 x 128,
#: 1 x 2048 x 256) is 2**19.  Below, one thread: a parallel region costs more than it saves.
#: Lowered from 2**24 when Numba moved to TBB, whose workers do not sleep between regions
#: (medians, one process, the two alternated: 8 x 2048 x 2048 1.10 -> 0.98 ms, 1 x 4096 x
#: 4096 3.13 -> 2.56, 8 x 4096 x 4096 6.42 -> 4.77; 1 x 2048 x 2048 and ResNet-50 unchanged)
SKINNY_PARALLEL = 1 << 19


def skinny_candidate(g: Geometry, rows_kept: bool = False) -> bool:
    """Whether :func:`accumulate_fp16` tries the skinny kernel for this task (an ungrouped
    fp16 convolution of at most :data:`SKINNY_ROWS` pixels, above ``SMALL_MACS``, with
    fewer pixels than output channels, at most :data:`NARROW_PIXELS` pixels, or
    ``rows_kept``: the kernel's rows of these im2col columns made by an earlier task of
    the layer): its MAC would read the fp16 weights where KernelDMA puts them."""
    P = g.hout * g.wout
    return (
        g.mode == CONV
        and g.groups == 1
        and g.macs > _kmac.SMALL_MACS
        and P <= SKINNY_ROWS
        and (P < g.cout or P <= NARROW_PIXELS or rows_kept)
        and not isinstance(g.kernel_fmt, palette.Palettized)
        and DTYPES[g.kernel_fmt] == np.float16
    )


def narrow(g: Geometry) -> bool:
    """A plain 1x1 convolution whose output is narrow (few pixels, more channels: a matmul
    with few rows, e.g. a decode step or a short prefill): :func:`accumulate_fp16`
    computes it transposed, vectorized across the channels, reading the transposed
    weights the engine keeps (float16, :func:`transposed_weights`)."""
    P = g.hout * g.wout
    return plain(g) and P <= NARROW_PIXELS and P < g.cout // g.groups


def transposed_weights(g: Geometry, w: np.ndarray):
    """``(w^T, max |w|)``: the decoded weights ``w`` of a 1x1 convolution as ``[groups,
    Cin/groups, Cout/groups]``, C-contiguous **float16** (exact: fp16 values; a quarter of
    the bytes of float64, which the MAC kernels' float32 fast path decodes as it loads
    them: a product with few rows streams its weights once per call), and their
    largest magnitude per group (float64; NaN if a weight is NaN).  The engine keeps them
    with the decoded weights (resident weights are transposed once)."""
    G = g.groups
    w3 = w.reshape(G, g.cout // G, g.cin_g)
    wmax = np.empty(G)
    _kmac._abs_max(w3, wmax)
    return np.ascontiguousarray(w3.transpose(0, 2, 1), dtype=np.float16), wmax


def abs_max(x: np.ndarray, out: np.ndarray) -> None:
    """``out[n] = max |x[n]|`` per leading index (NaN when ``x[n]`` holds a NaN)."""
    _kmac._abs_max(x, out)


def accumulate_fp16(
    g: Geometry,
    src16: np.ndarray,
    plane: int,
    row: int,
    w,
    buffer,
    trunc: bool = False,
    transposed=None,
    kmem16=None,
    columns=None,
):
    """``(acc, flag)`` of the convolution of the fp16 tensor TileDMASrc reads
    (``src16[c*plane + y*row + x]``, the checked window as uint16), the decode fused into
    building the MAC kernels' operand: the input itself for a plain 1x1 convolution
    (:func:`fastane.kernels.dma.gather_f16`), else its im2col unfolding
    (:func:`fastane.kernels.dma.unfold_f16`), then ``matmul_q16_into`` per group -- the
    calls ``conv2d_q16`` makes for one image, with the same operand, the same ``max |x|``
    bound and so the same bits.  ``buffer(name, shape, dtype)`` provides the arrays
    (the engine's kept scratch buffers).

    ``transposed()``, when given, returns ``(w^T, max |w|)`` (``[G, Cin/G, Cout/G]``; the
    engine keeps them with the decoded weights): a :func:`narrow` output is then computed
    as ``acc^T = x^T @ w^T`` per group, so that the kernels vectorize across the output
    channels instead of the few pixels.  The same bits: every output is still the serial,
    per-step clamped sum over ``k = 0..K-1`` of ``round(x[k] * w[k])`` (a product of two
    fp16 values is exact, so ``x * w`` and ``w * x`` are the same number), which
    ``matmul_q16_into`` computes exactly whichever operand is on the left; only the proof
    of which outputs cannot clamp (the bounds) looks at the operands the other way round.

    ``kmem16()``, when given, returns the fp16 weights where KMem holds them, ``(k16,
    per_lane, lanes, sizes)`` (:func:`fastane.device.kernel_dma.fp16_channels`), or None:
    an ungrouped narrow output of at most :data:`SKINNY_ROWS` pixels whose rows pass the
    bounds is then computed from them (:func:`skinny`), the same bits again; the result
    is then ``(sums, None)``: exact int32 sums, no step clamped (no flags), which
    :func:`fastane.device.ne.finish` reads out as it reads ``(acc, flag)``.  The general
    kernels return ``(sums, None)`` too when every row takes their float32 fast path
    (:func:`fastane.kernels.mac.matmul_q16_sums`), else ``(acc, flag)``.

    ``w`` is the decoded weights (float64 ``[Cout, Cin/G, Kh, Kw]``) or a callable that
    returns them: a narrow output whose ``transposed()`` is kept never decodes them.

    Small work (``g.macs <= SMALL_MACS``) skips the bounds and the split: the serial
    definition itself, on the calling thread (:func:`fastane.kernels.mac.matmul_q16_small`).

    ``columns``, when given, is ``(record, key)``: the engine's record of what the
    :data:`COLUMNS` buffer holds (``{key: [max |x| per channel, the skinny kernel's rows
    of them or None]}``) and this task's :func:`unfolding_key`: an unfolding of the same
    source window with the same windows is not made again, nor are its rows for the
    skinny kernel (the tasks of one layer split by output channels all read one input;
    the engine forgets the record when a task writes DRAM over that window, when a chain
    starts, and when the buffer changes)."""
    G, P = g.groups, g.hout * g.wout
    cog, kc = g.cout // G, g.cin_g * g.kh * g.kw
    acc = buffer("acc", (1, g.cout, g.hout, g.wout), np.float64)
    flag = buffer("flag", (1, g.cout, g.hout, g.wout), np.int8)
    small = g.macs <= _kmac.SMALL_MACS
    if plain(g):
        cmax = np.empty(g.cin, np.int64)
        if not small and not narrow(g):
            # the float32 fast path's operand: the input's fp16 patterns, decoded as they
            # load (matmul_q16_into makes a float64 copy only if another path needs one)
            x = buffer("x16", (1, g.cin, g.hin, g.win), np.uint16)
            _kdma.gather_bits(src16, plane, row, x[0], cmax)
            if kmem16 is not None and skinny_candidate(g):
                sums = skinny(g, x.reshape(kc, P), kmem16(), buffer, trunc)
                if sums is not None:
                    return sums, None
            cols = x.reshape(G, kc, P).view(np.float16)
        else:
            done, cols = _plain_narrow(
                g, src16, plane, row, w, buffer, transposed, kmem16, trunc, acc, flag, cmax
            )
            if done is not None:
                return done
        bmax = _max_abs(cmax, G)
    else:
        # the columns as fp16 patterns: the operand the float32 fast path decodes as it
        # loads (matmul_q16_into makes a float64 copy only if another path needs one)
        cols = buffer(COLUMNS, (G, kc, P), np.uint16)
        memo, key = columns if columns is not None else (None, None)
        kept = None if memo is None else memo.get(key)
        if kept is None:
            tmax = np.empty(g.cin)
            with _kpar.threads_for(g.macs, _kmac.SERIAL_MACS):  # as conv2d_q16 runs its unfolding
                _kdma.unfold_f16(
                    src16, plane, row, g.hin, g.win, g.cin_g, *_unfolding(g), cols, tmax, _kpar.workers()
                )
            kept = [tmax, None]
            if memo is not None:
                memo.clear()  # the buffer holds this unfolding only
                memo[key] = kept
        tmax = kept[0]
        if kmem16 is not None and skinny_candidate(g, kept[1] is not None):
            sums = skinny(g, cols[0], kmem16(), buffer, trunc, kept)
            if sums is not None:
                return sums, None
        cols = cols.view(np.float16)
        bmax = tmax.reshape(G, g.cin_g).max(axis=1)  # NaN propagates
    idx = _arange(G)
    sums = buffer("sums", (1, g.cout, g.hout, g.wout), np.int32)
    if _kmac.matmul_q16_sums(
        _decoded(w).reshape(G, cog, kc),
        cols,
        idx,
        idx,
        trunc,
        sums.reshape(G, cog, P),
        acc.reshape(G, cog, P),
        flag.reshape(G, cog, P),
        bmax,
    ):
        return sums, None
    return acc, flag


#: the scratch buffer (``buffer(name, ...)``) the im2col columns are unfolded into
COLUMNS = "cols16"


def unfolding_key(g: Geometry, lo: int, hi: int, plane: int, row: int) -> tuple:
    """What an im2col unfolding depends on: the source window (its bytes ``[lo, hi)`` in
    unified memory, its strides) and the windows read from it; the first two entries are
    ``lo`` and ``hi`` (the range a write must miss to leave the unfolding valid)."""
    return (
        lo,
        hi,
        plane,
        row,
        g.cin,
        g.groups,
        g.hin,
        g.win,
        g.hout,
        g.wout,
        g.kh,
        g.kw,
        g.sy,
        g.sx,
        g.dy,
        g.dx,
        g.pad_top,
        g.pad_left,
    )


def _plain_narrow(g: Geometry, src16, plane, row, w, buffer, transposed, kmem16, trunc, acc, flag, cmax):
    """:func:`accumulate_fp16` of a plain convolution that is small or :func:`narrow`: the
    input decoded (``cmax``: its per-channel largest magnitude patterns), then the
    serial definition, the skinny kernel or the transposed product: ``(result, None)``
    with :func:`accumulate_fp16`'s result; or, when none applies, ``(None, the decoded
    input as the general kernels' right operand [G, Cin/G, P])``."""
    G, P = g.groups, g.hout * g.wout
    cog, kc = g.cout // G, g.cin_g * g.kh * g.kw
    small = g.macs <= _kmac.SMALL_MACS
    # float32 (exact: fp16 values) for the skinny kernel, unless the product is small
    # or takes the transposed weights (those read float64)
    f32 = not small and transposed is None
    x = buffer("x32" if f32 else "x", (1, g.cin, g.hin, g.win), np.float32 if f32 else np.float64)
    _kdma.gather_f16(src16, plane, row, x[0], cmax)
    if small:
        idx = _arange(G)
        _kmac.matmul_q16_small(
            _decoded(w).reshape(G, cog, kc),
            x.reshape(G, kc, P),
            idx,
            idx,
            trunc,
            acc.reshape(G, cog, P),
            flag.reshape(G, cog, P),
        )
        return (acc, flag), None
    if kmem16 is not None and skinny_candidate(g):
        sums = skinny(g, x.reshape(kc, P), kmem16(), buffer, trunc)
        if sums is not None:
            return (sums, None), None
    if transposed is not None and narrow(g):
        wt, wmax = transposed()
        xt = buffer("xt", (G, P, g.cin_g), np.float64)
        xt[...] = x.reshape(G, g.cin_g, P).transpose(0, 2, 1)
        acc_t = buffer("acc_t", (G, P, cog), np.float64)
        flag_t = buffer("flag_t", (G, P, cog), np.int8)
        idx = _arange(G)
        # few rows: run it on the calling thread.  The engine runs the tasks one after
        # the other, so each would be a parallel region of its own, and on a busy
        # machine every region waits for its worker thread to be scheduled (one tile:
        # 0.9 ms serial vs 48 ms at 8 x 2048 x 256; 64 x 2048 x 2048 in 8 tasks of two
        # tiles, load 7 on 2 cores: 60-95 ms on one thread, 370-400 ms on two)
        with _kpar.threads_for(0, NARROW_SERIAL):
            _kmac.matmul_q16_into(xt, wt, idx, idx, trunc, acc_t, flag_t, wmax)
        acc.reshape(G, cog, P)[...] = acc_t.transpose(0, 2, 1)
        flag.reshape(G, cog, P)[...] = flag_t.transpose(0, 2, 1)
        return (acc, flag), None
    return None, x.reshape(G, g.cin_g, P)


def skinny(g: Geometry, x: np.ndarray, weights, buffer, trunc: bool, kept=None):
    """The exact sums of an ungrouped convolution with few pixels (``x`` ``[K, P]``: the
    input of a 1x1 convolution, float64 or float32 fp16 values or their patterns, or the
    im2col columns as patterns, ``K = Cin x Kh x Kw``) from the fp16 weights in KMem
    (``weights``: :func:`fastane.device.kernel_dma.fp16_channels`, or None), along ``K``
    (:func:`fastane.kernels.mac_skinny.skinny_q16`): int32 ``[1, Cout, Hout, Wout]`` in
    grid units, none clamped (:func:`fastane.kernels.ne.readout_sums` reads them out).
    Returns None, the sums discarded, unless every row's products fit the float32
    rounding and its bound proves no step clamps (then the caller's general kernels,
    which handle those rows exactly, run instead).  The bound's ``max |w|`` is the one the
    kernel returns from its single pass over the weights: checked after the sums, before
    they are used.

    ``kept``: the record of :func:`accumulate_fp16` for im2col columns (``x``), whose rows
    (``xs`` and their row statistics, in their own buffer) it keeps in ``kept[1]`` for the
    next task that reads the same columns."""
    if weights is None:
        return None
    k16, base, per_lane, _, _ = weights
    K, P = x.shape
    nw = _kpar.workers()
    xs = buffer("xs" if kept is None else "xs_columns", (P, K), np.float32)
    if kept is not None and kept[1] is not None and kept[1][0] is xs:  # the same buffer
        _, rsum, rmax = kept[1]
    else:
        rsum, rmax = np.empty(P), np.empty(P)
        if K * P >= _kskinny.PREPARE_PARALLEL and P > 1 and nw > 1:
            _kskinny.prepare_par(x, xs, rsum, rmax, nw)
        else:
            _kskinny.prepare(x, xs, rsum, rmax)
        if kept is not None:
            kept[1] = (xs, rsum, rmax)
    if not _kskinny.rows_ok(rsum, rmax, 0.0, K):  # NaN or inf in x: no max |w| admits it
        return None
    sums = buffer("sums", (g.cout, P), np.int32)
    if g.macs >= SKINNY_PARALLEL and nw > 1:
        wmax = _kskinny.skinny_q16_par(
            xs, k16, base, per_lane, K, g.cout, trunc, sums, _kskinny.ROW_BLOCK_BYTES, nw
        )
    else:
        wmax = _kskinny.skinny_q16(xs, k16, base, per_lane, K, g.cout, trunc, sums, _kskinny.ROW_BLOCK_BYTES)
    if not _kskinny.rows_ok(rsum, rmax, _kskinny.pattern_abs(wmax), K):
        return None
    return sums.reshape(1, g.cout, g.hout, g.wout)


def _decoded(w) -> np.ndarray:
    """The weights ``w`` of :func:`accumulate_fp16`: the array, or what the callable returns."""
    return w() if callable(w) else w


def read_out(acc: np.ndarray, flag: np.ndarray):
    """``(values, saturated, nan_outputs)``: the accumulators read out to fp16 values
    (float64, :func:`fastane.kernels.mac.readout`) and the counts of outputs that read
    out as +-inf because their accumulator clamped, and as NaN (not a saturation)."""
    values = np.empty(acc.shape, dtype=np.float64)
    _kmac.readout(acc, flag, values)
    nan = np.isnan(values)
    nans = int(np.count_nonzero(nan))
    saturated = int(np.count_nonzero(flag))
    if saturated and nans:  # a NaN output reads NaN whatever its flag: not a saturation
        saturated -= int(np.count_nonzero(flag[nan]))
    return values, saturated, nans


def run(g: Geometry, x: np.ndarray, w: np.ndarray | None, trunc: bool = False, cmax=None):
    """``(values, saturated, nan_outputs)``: fp16 values (float64) ``[1, Cout, Hout, Wout]``;
    ``saturated`` counts the outputs that read out as +-inf because their accumulator
    clamped (a NaN output is counted in ``nan_outputs`` only).  (The engine fuses the
    readout into the NE stage when the result goes to DRAM: :func:`fastane.device.ne.finish`.)
    ``cmax``: the per-channel largest magnitude patterns of ``x`` (TileDMASrc's), if known:
    a pass-through with none above 0x7c00 holds no NaN, and is not searched for one."""
    if g.mode == PASSTHROUGH:
        if cmax is not None and (cmax.size == 0 or int(cmax.max()) <= _INF_BITS):
            return x, 0, 0
        return x, 0, int(np.isnan(x).sum())
    return read_out(*accumulate(g, x, w, None, trunc))
