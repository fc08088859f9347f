"""The tiler (the only one): how a convolution is cut into tasks that fit KMem, L2 and
the TD fields, and how an activation's flat tensor is cut into tiles.  docs/lower.md,
section 2.

One task = one *kernel group* (output channels; whole conv groups when they fit) x one
*tile* (output rows, or columns of one row).  KMem: a task's output channels are dealt to
the cores by :func:`fastane.m1.kernel_layout`; L2: the input tile (with its halo) and the
output-sized tiles a task's chain keeps must fit together.  The reduction is never split
across tasks (the partial sums would be read out to fp16 and added again, which changes
the numerics): :func:`plan_tiling` raises ``NotImplementedError`` when one output
channel's kernel cannot fit a core.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from . import compressed as _compressed
from ..m1 import ALIGN, LIMITS, LUT_BLOCK, TD_SIZE, Limits, core_bytes, kernel_layout, round_up, size_str
from .problems import Conv, NEStage, ne_stage

__all__ = ["Tiling", "plan_tiling", "effective", "axis", "kernel_groups", "flat_tiles", "ELT_MIN_WIDTH"]

#: narrowest row a long tensor is cut into when looking for a width that divides it
ELT_MIN_WIDTH = 1024


@dataclass(frozen=True)
class Tiling:
    """How a convolution is cut into tasks (see the module docstring)."""

    #: "direct" (the TDs hold kernel, stride, dilation, padding), "padded" (padding
    #: materialized in the input buffer) or "im2col" (unfolded on the host to a 1x1 conv)
    mode: str
    #: output channels of a full kernel group (the last one may be smaller)
    cout_t: int
    #: whole conv groups per task (0 when a task holds part of one group)
    groups_t: int
    #: output rows and columns of a full tile
    th: int
    tw: int

    def describe(self) -> str:
        s = f"{self.mode}: kernel groups of {self.cout_t} ch"
        if self.groups_t > 1:
            s += f" ({self.groups_t} conv groups)"
        return s + f", tiles {self.th}x{self.tw}"


def effective(conv: Conv, lim: Limits, force_padded: bool = False) -> tuple[str, Conv]:
    """The convolution the TDs run: ``conv`` itself, with its padding materialized, or
    unfolded to a 1x1 convolution."""
    (kh, kw), (sy, sx), (dy, dx) = (conv.kh, conv.kw), conv.stride, conv.dilation
    if max(kh, kw) > lim.max_kernel or max(sy, sx) > lim.max_stride or max(dy, dx) > lim.max_dilation:
        # the unfolded input: (Cin x Kh x Kw) channels of Hout x Wout pixels, laid out as
        # one row (a 1x1 convolution does not care, and long rows waste fewer DMA bursts)
        return "im2col", Conv(
            conv.n,
            conv.cin * kh * kw,
            1,
            conv.hout * conv.wout,
            conv.cout,
            groups=conv.groups,
            bias=conv.bias,
            activation=conv.activation,
            kernel_bits=conv.kernel_bits,
            kernel_int8=conv.kernel_int8,
        )
    (pt, pb), (pl, pr) = conv.pad
    sh, sw = conv.span
    ok = max(pt, pl) <= lim.max_padding and pt < sh and pb < sh and pl < sw and pr < sw
    if force_padded or not ok:
        if (pt, pb, pl, pr) == (0, 0, 0, 0):
            return "direct", conv
        return "padded", dataclasses.replace(
            conv, h=conv.h + pt + pb, w=conv.w + pl + pr, pad=((0, 0), (0, 0))
        )
    return "direct", conv


def _core_capacity(per_channel: int, bias: bool, lut: bool, lim: Limits, prefix: int = 0) -> int:
    """Most output channels one core can hold: kernels (after a palette of ``prefix``
    bytes) (+ biases) (+ the LUT block), as :func:`fastane.m1.core_bytes` lays them out."""
    m = max(lim.kmem_core_bytes - prefix, 0) // per_channel
    while m > 0 and core_bytes(m, per_channel, bias, lut, prefix) > lim.kmem_core_bytes:
        m -= 1
    return m


def _candidates(c: Conv, lim: Limits, cmax: int, below_min: bool = False) -> list:
    """(cout_t, groups_t) kernel-group sizes to try, largest first: halving down to
    ``min_group`` channels, or with ``below_min`` the sizes below that, and parts of one
    conv group where whole groups were tried (a fallback when none of the first fits L2)."""
    G, cout_pg = c.groups, c.cout_g
    out, small = [], []
    if cout_pg <= cmax:  # whole conv groups per task
        g = min(G, cmax // cout_pg, lim.max_groups, lim.max_channels // c.cin_g, lim.max_channels // cout_pg)
        while g >= 1:
            (small if out and out[-1][0] <= lim.min_group else out).append((g * cout_pg, g))
            g //= 2
        # fallback: parts of one conv group (when even one whole group's output tiles do
        # not fit L2, e.g. with the intermediates a planar chain keeps there)
        k = cout_pg // 2
        while k >= 1:
            small.append((k, 0))
            k //= 2
    else:  # part of one conv group
        k = cmax if cmax < lim.min_group else cmax // lim.min_group * lim.min_group
        while k >= 1:
            (small if out and out[-1][0] <= lim.min_group else out).append((k, 0))
            k //= 2
    return small if below_min else out


def axis(n_out: int, t: int, stride: int, span: int, pad: int, n_in: int):
    """Tiles along one axis: (start, size, first input, input extent, leading pad) arrays."""
    starts = np.arange(0, n_out, t, dtype=np.int64)
    sizes = np.minimum(t, n_out - starts)
    lo = starts * stride - pad
    hi = (starts + sizes - 1) * stride - pad + span  # one past the last input row
    first = np.maximum(lo, 0)
    extent = np.minimum(hi, n_in) - first
    return starts, sizes, first, extent, first - lo


def kernel_groups(c: Conv, cout_t: int, groups_t: int):
    """Per kernel group: (output channel 0, channels, input channel 0, input channels, groups)."""
    out = []
    if groups_t:
        for g0 in range(0, c.groups, groups_t):
            ng = min(groups_t, c.groups - g0)
            out.append((g0 * c.cout_g, ng * c.cout_g, g0 * c.cin_g, ng * c.cin_g, ng))
    else:
        for g in range(c.groups):
            for j in range(0, c.cout_g, cout_t):
                out.append((g * c.cout_g + j, min(cout_t, c.cout_g - j), g * c.cin_g, c.cin_g, 1))
    return out


def _row_bytes(cols):
    """DMA bytes of rows of ``cols`` fp16 elements (whole 64-byte bursts; an array)."""
    return (cols * 2 + 63) // 64 * 64


def _cost(c: Conv, cout_t: int, groups_t: int, th: int, tw: int, stage: NEStage, lim: Limits):
    """(DRAM bytes incl. TDs, tasks) of one image under this tiling."""
    sh, sw = c.span
    _, rs, _, rin, _ = axis(c.hout, th, c.stride[0], sh, c.pad[0][0], c.h)
    _, cs, _, cin_, _ = axis(c.wout, tw, c.stride[1], sw, c.pad[1][0], c.w)
    src_tile = int((rin[:, None] * _row_bytes(cin_)[None, :]).sum())
    dst_tile = int(rs.sum()) * int(_row_bytes(cs).sum())
    ntiles = len(rs) * len(cs)
    per, pre = _compressed.kernel_bytes(c)  # fp16, or a palettized weight's codes
    total, tasks = 0, 0
    sizes = collections.Counter((ct, cit) for _, ct, _, cit, _ in kernel_groups(c, cout_t, groups_t))
    for (ct, cit), count in sizes.items():
        lay = kernel_layout(ct, per, c.bias, stage.lut, pre)
        total += count * (ntiles * sum(lay.sizes) + cit * src_tile + ct * dst_tile)
        tasks += count * ntiles
    # the tasks after each NE stage (intermediates stay in L2): their TDs, and the gate's
    # LUT block (silu, hard_swish) loaded once more per task
    total += tasks * (stage.post_tasks * TD_SIZE + (LUT_BLOCK if stage.gate is not None else 0))
    return total + tasks * TD_SIZE, tasks


def _fits(c: Conv, lim: Limits, cin_task: int, cout_task: int, th: int, tw: int, out_tiles: int = 1) -> bool:
    """The input tile and ``out_tiles`` output-sized tiles (the result, and the
    intermediates a planar chain keeps in L2) fit L2 together."""
    sh, sw = c.span
    rows = min((th - 1) * c.stride[0] + sh, c.h)
    cols = min((tw - 1) * c.stride[1] + sw, c.w)
    if max(rows, cols, th, tw) > lim.max_hw:
        return False
    return (
        cin_task * rows * round_up(cols * 2) + out_tiles * cout_task * th * round_up(tw * 2) <= lim.l2_bytes
    )


def _largest(lo: int, hi: int, ok) -> int:
    """Largest n in [lo, hi] with ok(n) (ok true then false); lo - 1 if none."""
    if hi < lo or not ok(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _tile_for(c: Conv, lim: Limits, cin_task: int, cout_task: int, out_tiles: int = 1):
    """The largest tile that fits L2: full rows first, else columns (multiples of 32) of one row."""
    ho, wo = c.hout, c.wout
    if wo <= lim.max_hw:
        th = _largest(1, ho, lambda t: _fits(c, lim, cin_task, cout_task, t, wo, out_tiles))
        if th >= 1:
            return th, wo
    a = lim.col_align
    j = _largest(
        1, min(wo, lim.max_hw) // a, lambda j: _fits(c, lim, cin_task, cout_task, 1, j * a, out_tiles)
    )
    return (1, j * a) if j >= 1 else None


def plan_tiling(conv: Conv, limits: Limits = LIMITS) -> Tiling:
    """The :class:`Tiling` :func:`~fastane.lower.build` uses for ``conv`` (see the module docstring).

    Raises ``NotImplementedError`` when one output channel's kernel does not fit a core's
    KMem (that would need the reduction split across tasks), or nothing fits L2.
    """
    return _tile(conv, limits)


@functools.lru_cache(maxsize=4096)
def _tile(conv: Conv, lim: Limits) -> Tiling:
    stage = ne_stage(conv.activation)
    mode, c = effective(conv, lim)
    if mode == "im2col" and c.n * c.cin * c.h * c.w * 2 > lim.max_unfold_bytes:
        raise NotImplementedError(
            f"a {conv.kh}x{conv.kw} kernel with stride {conv.stride} and dilation {conv.dilation} is "
            f"beyond the TD's fields and would be unfolded on the host to {size_str(c.n * c.cin * c.h * c.w * 2)}, "
            f"beyond the {size_str(lim.max_unfold_bytes)} fastane unfolds (Limits.max_unfold_bytes)"
        )
    best = _search(c, lim, stage)
    if best is not None and best[1].tw < c.wout and mode == "direct" and c.pad[1][0]:
        # column tiles must start on 64-byte boundaries: materialize the padding
        mode, c = effective(conv, lim, force_padded=True)
        best = _search(c, lim, stage)
    if best is None:
        per, pre = _compressed.kernel_bytes(c)
        if _core_capacity(per, c.bias, stage.lut, lim, pre) < 1:
            extra = (" plus its bias" if c.bias else "") + (" and the LUT block" if stage.lut else "")
            raise NotImplementedError(
                f"one output channel's kernel ({c.cin_g} input channels x {c.kh} x {c.kw} x "
                f"{_weight_size(c)} "
                f"= {per} bytes{extra}) does not fit a core's {size_str(lim.kmem_core_bytes)} KMem; "
                f"fastane does not split the reduction across tasks, because the partial sums would "
                f"be read out to fp16 and added again, which changes the numerics"
            )
        raise NotImplementedError(
            f"no tile of this convolution fits the {size_str(lim.l2_bytes)} L2 with the "
            f"smallest kernel group ({c.cin_g} input channels per group, input {c.h}x{c.w}, "
            f"kernel span {c.span[0]}x{c.span[1]}); splitting the reduction would change the "
            f"numerics"
        )
    return dataclasses.replace(best[1], mode=mode)


def _weight_size(c: Conv) -> str:
    return "1 byte" if c.kernel_int8 else f"{c.kernel_bits} bits" if c.kernel_bits else "2 bytes"


def _search(c: Conv, lim: Limits, stage: NEStage):
    per, pre = _compressed.kernel_bytes(c)
    m = _core_capacity(per, c.bias, stage.lut, lim, pre)
    if m < 1:
        return None
    cmax = min(m * lim.cores, lim.max_channels)
    best = None
    for below_min in (False, True):
        for cout_t, groups_t in _candidates(c, lim, cmax, below_min):
            cin_task = groups_t * c.cin_g if groups_t else c.cin_g
            t = _tile_for(c, lim, cin_task, cout_t, stage.out_tiles)
            if t is None:
                continue
            cost = _cost(c, cout_t, groups_t, t[0], t[1], stage, lim)
            if best is None or cost < best[0]:
                best = (cost, Tiling("direct", cout_t, groups_t, t[0], t[1]))
        if best is not None:
            return best
    return best


def _flat_shape(n: int, width_max: int, lim: Limits) -> tuple:
    """``(width, rows, rem)`` with ``n = rows x width + rem``: one row when it fits,
    else the widest multiple of 32 (>= :data:`ELT_MIN_WIDTH`) dividing ``n``, else the
    widest row and a remainder."""
    if n <= width_max:
        return n, 1, 0
    a = lim.col_align
    top = width_max // a * a
    for w in range(top, min(ELT_MIN_WIDTH, top) - 1, -a):
        if n % w == 0:
            return w, n // w, 0
    return top, n // top, n % top


def flat_tiles(n: int, stage: NEStage, lim: Limits, k: int | None = None) -> tuple:
    """How an activation over ``n`` flat elements is cut: ``(width, rows, rem, tiles)``,
    ``tiles`` = ``[(first element, rows, width)]``: balanced tiles of whole rows that fit
    L2 with the tensors the chain holds there at once (``k``; by default from ``stage``),
    then the remainder row."""
    if k is None:
        k = 2 if stage.post is None else 3  # tensors a tile's chain holds in L2 at once
    width_max = min(lim.max_hw, lim.l2_bytes // (k * ALIGN) * lim.col_align)
    if width_max < 1:
        raise NotImplementedError(f"no row of an elementwise task fits the {size_str(lim.l2_bytes)} L2")
    width, rows, rem = _flat_shape(n, width_max, lim)
    th = min(rows, lim.max_hw, lim.l2_bytes // (k * round_up(2 * width)))
    ntiles = -(-rows // th)
    th = -(-rows // ntiles)  # balanced tiles
    tiles = [(r0 * width, min(th, rows - r0), width) for r0 in range(0, rows, th)]
    if rem:
        tiles.append((rows * width, 1, rem))
    return width, rows, rem, tiles
